"""``stepscope record`` on CPU torch training scripts, and the in-process API."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.capture.topology import format_cpulist
from stepscope.cli.main import main
from stepscope.store.run import Run

SRC = str(Path(__file__).resolve().parents[2] / "src")
needs_host = pytest.mark.skipif(importlib.util.find_spec("stepscope.capture.host") is None,
                                reason="capture/host.py (HostCapture) is not in the tree yet")

TRAIN = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
ds = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
loader = DataLoader(ds, batch_size=16)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
CRASH_AFTER = int(sys.argv[1]) if len(sys.argv) > 1 else None
for i, (x, y) in enumerate(loader):
    if CRASH_AFTER is not None and i == CRASH_AFTER:
        raise RuntimeError("crash for the test")
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    time.sleep(0.02)  # long enough steps for a few samples in the window
print("done", i + 1)
"""


def record(tmp_path: Path, *args: str, opts: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    env["PYTHONPATH"] = SRC
    return subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                           *opts, "--", str(script), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@needs_host
def test_cpu_torch_training_is_recorded(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = record(tmp_path, opts=("--steps", "5-14", "--sample-hz", "50"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done 32\n"
    assert "stepscope: wrote run" in r.stderr
    run = Run(tmp_path / "run")
    assert not run.manifest.partial
    assert run.table("steps").num_rows == 10  # steps 5..14
    assert run.table("input_waits").num_rows > 0
    assert run.table("samples").num_rows > 0
    assert run.table("threads").num_rows > 0 and run.table("processes").num_rows == 1
    if hasattr(os, "sched_getaffinity"):  # the program inherits this process's CPUs
        want = format_cpulist(os.sched_getaffinity(0))
        assert run.table("processes").column("cpu_affinity").to_pylist() == [want]
    assert "rank0" in run.manifest.overhead
    assert any(d.code == "gpu_not_captured" for d in run.manifest.diagnostics)


def test_crashing_program_leaves_a_partial_run_that_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    r = record(tmp_path, "5", opts=("--quiet",))
    assert r.returncode == 1
    assert "RuntimeError: crash for the test" in r.stderr
    run = Run(tmp_path / "run")
    assert run.manifest.partial
    assert any("exception: RuntimeError" in d.message for d in run.manifest.diagnostics)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    assert main(["report", str(tmp_path / "run"), "--format", "json"]) == 0


def test_python_api_records_in_process(tmp_path: Path) -> None:
    import stepscope

    with stepscope.record(out=tmp_path / "api-run", steps="2-4", hooks=False) as r:
        for _ in range(8):
            r.step()
            stepscope.step()  # the module-level form reaches the same capture
    assert r.path == tmp_path / "api-run"
    run = Run(r.path)
    assert run.manifest.source.kind == "capture"
    assert run.manifest.settings["ranks"]["rank0"]["step_boundaries_seen"] == 16
    stepscope.step()  # no capture running: a no-op


def test_python_api_marks_partial_on_exception(tmp_path: Path) -> None:
    import stepscope

    with pytest.raises(KeyError):
        with stepscope.record(out=tmp_path / "api-run", hooks=False):
            raise KeyError("x")
    assert Run(tmp_path / "api-run").manifest.partial


def test_record_rejects_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--steps", "9-3", "--", "x.py"]) == 2
    assert main(["record", "--steps", "1-2", "--delay", "1", "--", "x.py"]) == 2
    assert main(["record"]) == 2
    err = capsys.readouterr().err
    assert "--steps" in err and "no command" in err


@needs_host
@pytest.mark.parametrize("backend", ["none", "auto"])
def test_gpu_backend_choice_without_a_gpu(tmp_path: Path, backend: str) -> None:
    """No GPU here: 'none' starts nothing; the default says why it captured no GPU activity and
    the host-side run is complete all the same (the program's output untouched)."""
    pytest.importorskip("torch")
    r = record(tmp_path, opts=("--steps", "3-8", "--backend", backend, "--gpu-api", "all"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done 32\n"
    run = Run(tmp_path / "run")
    gpu = run.manifest.settings["ranks"]["rank0"]["gpu"]
    assert run.manifest.settings["backend"] == backend and run.manifest.settings["gpu_api"] == "all"
    assert run.table("steps").num_rows == 6
    if backend == "none":
        assert gpu["state"] == "off"
    else:
        assert gpu["state"] == "unavailable" and gpu["reason"]
        msgs = [d.message for d in run.manifest.diagnostics if d.code == "gpu_not_captured"]
        assert any(gpu["reason"] in m for m in msgs)
    assert run.manifest.source.tool.endswith("record (host)")


def test_backend_option_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--backend", "nvprof", "--", "x.py"]) == 2
    assert "invalid choice: 'nvprof'" in capsys.readouterr().err


@needs_host
def test_torch_backend_records_the_profilers_events(tmp_path: Path) -> None:
    """--backend torch on CPU torch: torch.profiler runs in the window and its trace comes back
    through the Kineto importer (CPU ops here; kernels too on a GPU)."""
    pytest.importorskip("torch")
    r = record(tmp_path, opts=("--steps", "3-8", "--backend", "torch"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done 32\n"
    assert "UserWarning" not in r.stderr  # the profiler's warnings stay out of the program's stderr
    run = Run(tmp_path / "run")
    gpu = run.manifest.settings["ranks"]["rank0"]["gpu"]
    assert gpu["state"] == "stopped" and gpu["backend"] == "torch" and gpu["events"] > 0
    ops = run.table("cpu_ops")
    assert ops.num_rows > 0 and any(n.startswith("aten::") for n in ops.column("name").to_pylist())
    steps = run.table("steps")
    lo, hi = min(steps.column("ts_ns").to_pylist()), max(
        t + d for t, d in zip(steps.column("ts_ns").to_pylist(), steps.column("dur_ns").to_pylist()))
    mids = [t + d // 2 for t, d in zip(ops.column("ts_ns").to_pylist(), ops.column("dur_ns").to_pylist())]
    assert all(lo <= m <= hi for m in mids)  # clipped to the window, on the host clock
    assert run.manifest.source.tool.endswith("record (host + torch)")
