"""The GPU slot's last tables carry the ``devices`` rows of the GPUs the process used, whatever
the backend; a backend that cannot start on a machine without a usable GPU says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.capture.fake_cuda import FakeCuda
from tests.capture.test_cuda_driver import libcuda_loadable

from stepscope.capture.cupti.native import Unavailable
from stepscope.capture.gpu import GpuSlot
from stepscope.store.manifest import Diagnostic
from stepscope.store.run import Run

CUPTI_SAYS = "cannot enable CUPTI kernel records: CUPTI_ERROR_UNKNOWN"
NO_DRIVER = "no NVIDIA GPU or driver found (libcuda.so.1 could not be loaded)"


class Backend:
    """A GPU backend whose last tables are given."""

    backend = "fake"

    def __init__(self, tables: dict[str, Any], raw_records: int = 0) -> None:
        self.tables, self.raw_records = tables, raw_records

    def start(self) -> None:
        pass

    def flush(self, forced: bool = False) -> dict[str, Any]:
        return {}

    def stop(self) -> dict[str, Any]:
        return self.tables

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return ()

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": self.backend}


def stopped(backend: Backend, fake: FakeCuda | None) -> tuple[dict[str, Any], list[Diagnostic]]:
    slot = GpuSlot("cupti", "filtered", lambda b, a: backend,
                   driver=lambda: fake.driver() if fake else None)
    assert slot.start() is None
    return slot.data(final=True)


def test_devices_of_the_active_contexts_and_of_the_records() -> None:
    fake = FakeCuda(devices=4, active={0})
    kernels = {"ts_ns": np.array([1, 2]), "device": np.array([2, 2], dtype=np.int32)}
    data, diags = stopped(Backend({"kernels": kernels}), fake)
    dev = data["devices"]
    assert dev["device"] == [0, 2]  # 0: its primary context is active; 2: it ran kernels
    assert dev["name"] == ["NVIDIA H100 80GB HBM3"] * 2 and dev["vendor"] == ["nvidia"] * 2
    assert dev["sm_count"] == [132, 132] and dev["l2_bytes"] == [52_428_800] * 2
    assert dev["memory_bandwidth_gbs"] == pytest.approx([3352.32, 3352.32])
    assert data["kernels"] is kernels and diags == []
    assert "cuInit" not in fake.log


def test_flushes_carry_no_devices() -> None:
    slot = GpuSlot("cupti", "filtered", lambda b, a: Backend({}),
                   driver=lambda: FakeCuda(active={0}).driver())
    slot.start()
    assert "devices" not in slot.data(final=False)[0]
    assert slot.data(final=True)[0]["devices"]["device"] == [0]


def test_the_backends_rows_give_way_to_the_drivers_and_unused_gpus_are_dropped() -> None:
    """--backend torch: Kineto lists every visible GPU; the driver describes the used ones."""
    kineto = {"device": [0, 1, 2], "name": ["k0", "k1", "k2"], "sm_count": [1, 1, 1],
              "vendor": ["nvidia"] * 3}
    kernels = {"ts_ns": [5], "device": [1]}
    data, _ = stopped(Backend({"kernels": kernels, "devices": kineto}), FakeCuda(devices=3))
    assert data["devices"]["device"] == [1] and data["devices"]["sm_count"] == [132]
    # no driver in the process: Kineto's row of the GPU used is kept
    data, _ = stopped(Backend({"kernels": kernels, "devices": kineto}), None)
    assert data["devices"]["device"] == [1] and data["devices"]["name"] == ["k1"]
    # no GPU used: none of Kineto's rows
    data, _ = stopped(Backend({"devices": kineto}), FakeCuda(devices=3))
    assert "devices" not in data


def test_gpu_records_without_a_driver_are_said() -> None:
    data, diags = stopped(Backend({}, raw_records=10), None)
    assert "devices" not in data
    assert [d.code for d in diags] == ["devices_not_read"]


def test_a_driver_that_fails_costs_only_the_devices() -> None:
    class Broken(FakeCuda):
        def name(self, dev: int) -> tuple[int, str]:
            raise OSError("gone")

    data, diags = stopped(Backend({"kernels": {"ts_ns": [1], "device": [0]}}), Broken())
    assert "devices" not in data and "kernels" in data
    assert [d.code for d in diags] == ["devices_not_read"]


def fails(b: str, a: str) -> Any:
    raise Unavailable(CUPTI_SAYS)


def test_no_usable_gpu_is_the_reason_given() -> None:
    slot = GpuSlot("cupti", "filtered", fails, no_gpu=lambda: NO_DRIVER)
    diag = slot.start()
    assert diag is not None and diag.code == "gpu_not_captured"
    assert diag.message == f"GPU activity not captured (cupti): {NO_DRIVER}; host-side data only"
    assert slot.status == {"backend": "cupti", "state": "unavailable", "reason": NO_DRIVER,
                           "backend_error": CUPTI_SAYS}
    # a GPU is there: the backend's own reason stands
    slot = GpuSlot("cupti", "filtered", fails, no_gpu=lambda: None)
    diag = slot.start()
    assert diag is not None and CUPTI_SAYS in diag.message
    assert slot.status["reason"] == CUPTI_SAYS and "backend_error" not in slot.status


@pytest.mark.skipif(libcuda_loadable(), reason="this machine has a CUDA driver")
def test_record_on_a_machine_without_a_driver_says_so(tmp_path: Path) -> None:
    """`stepscope record` with the default backend, here (no libcuda; CUPTI itself answers
    CUPTI_ERROR_UNKNOWN where libcupti is installed)."""
    script = tmp_path / "loop.py"
    script.write_text("import time, stepscope\nfor _ in range(12):\n"
                      "    stepscope.step()\n    time.sleep(0.005)\nprint('done')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    r = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                        "--steps", "3-6", "--", str(script)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    run = Run(tmp_path / "run")
    assert run.manifest.settings["ranks"]["rank0"]["gpu"]["reason"] == NO_DRIVER
    msgs = [d.message for d in run.manifest.diagnostics if d.code == "gpu_not_captured"]
    assert any(NO_DRIVER in m for m in msgs)
