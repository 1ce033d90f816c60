"""The fallback time window with the ``cupti`` backend (a stand-in libcupti, the real C shim): the
raw records the tentative capture kept before the window are clipped away when the run is merged,
and those of a program that ended in the warm-up are kept."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
from tests.capture.cupti.fake_cupti import FakeCupti
from tests.capture.cupti.records import kernel
from tests.capture.cupti.test_capture import use_fake
from tests.capture.test_bootstrap import FakeClock, FakeHost

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.partitions import merge
from stepscope.store.run import Run

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")
S = 1_000_000_000


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))


@pytest.fixture
def fake(shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> FakeCupti:
    return use_fake(shim, monkeypatch)


def session(tmp_path: Path, in_use: list[bool]) -> tuple[Session, FakeClock]:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), flush_every_s=1.0)
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk),
                gpu_probe=lambda: in_use[0], poll_s=None, steps_probe=lambda: False)
    return s, clock


def tick(s: Session, clock: FakeClock, seconds: float) -> None:
    for _ in range(round(seconds * 4)):
        clock.t += S // 4
        s.poll()


def test_raw_records_before_the_time_window_are_clipped_at_merge(fake: FakeCupti,
                                                                 tmp_path: Path) -> None:
    in_use = [True]
    s, clock = session(tmp_path, in_use)
    s.begin()
    tick(s, clock, 0.25)  # the GPU is in use: CUPTI starts
    name = fake.name("_Z6kernelv")
    t_gpu = clock.t
    fake.emit(kernel(t_gpu + S // 10, t_gpu + S // 10 + 1000, name=name, corr=1))
    tick(s, clock, 1.5)  # a flush of the tentative capture keeps it raw, before the window
    assert list(s.partition.path.glob("cupti.*.bin"))
    tick(s, clock, 1.5)  # 3 s: the window opens
    assert s.open_ns == t_gpu + 3 * S
    fake.emit(kernel(t_gpu + 4 * S, t_gpu + 4 * S + 1000, name=name, corr=2))
    fake.emit(kernel(t_gpu + 5 * S, t_gpu + 5 * S + 1000, name=name, corr=3))
    tick(s, clock, 3.0)
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    ts = run.table("kernels").column("ts_ns").to_pylist()
    assert ts == [t_gpu + 4 * S, t_gpu + 5 * S]  # not the warm-up's kernel
    assert run.manifest.settings["ranks"]["rank0"]["window_kind"] == "gpu_time"


def test_a_program_ending_in_the_warm_up_keeps_its_raw_records(fake: FakeCupti,
                                                               tmp_path: Path) -> None:
    in_use = [True]
    s, clock = session(tmp_path, in_use)
    s.begin()
    tick(s, clock, 0.25)
    t_gpu = clock.t
    fake.emit(kernel(t_gpu + S // 10, t_gpu + S // 10 + 1000, name=fake.name("k"), corr=1))
    tick(s, clock, 1.0)
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert run.table("kernels").column("ts_ns").to_pylist() == [t_gpu + S // 10]
    assert any(d.code == "window_includes_warmup" for d in run.manifest.diagnostics)


def test_decoding_raw_records_tells_its_progress(fake: FakeCupti, tmp_path: Path) -> None:
    s, clock = session(tmp_path, [True])
    s.begin()
    tick(s, clock, 3.25)  # the window is open
    name = fake.name("k")
    for i in range(50):
        fake.emit(kernel(clock.t + i, clock.t + i + 1, name=name, corr=i + 1))
    tick(s, clock, 1.0)
    s.finish()
    size = sum(p.stat().st_size for p in s.partition.path.glob("cupti.*.bin"))
    calls: list[tuple[str, float, float]] = []
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0,
                    progress=lambda what, done, total: calls.append((what, done, total))))
    assert run.table("kernels").num_rows == 50
    decoding = [c for c in calls if c[0] == "decoding GPU records"]
    assert size > 0 and decoding and decoding[-1] == ("decoding GPU records", size, size)
