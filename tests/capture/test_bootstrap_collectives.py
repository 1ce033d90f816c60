"""The session writes the window's collectives (flight recorder) into its partition: when the
window closes, when the program ends inside it, for the tail when no window opened; a failing
read is a diagnostic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps
from tests.capture.test_flight_recorder import FakeC10d, modules, pickled

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.flight_recorder import FlightRecorderTap
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.store.run import Run

STEP = 10_000_000  # run_steps' 10 ms


def _entry(t: int, seq: int) -> dict[str, Any]:
    return {"record_id": seq - 1, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce",
            "time_created_ns": t, "input_sizes": [[1000]], "input_dtypes": ["BFloat16"],
            "output_sizes": [[1000]], "output_dtypes": ["BFloat16"], "is_p2p": False}


def _session(tmp_path: Path, steps: str | None, c10d: Any, **kw: Any) -> tuple[Session, FakeClock]:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps),
                        gpu="none", **kw)
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk),
                poll_s=None)
    # the recorder's clock is the capture's here (both fake): no offset
    s.comms = FlightRecorderTap(cfg.flight_recorder, {}, modules=modules(c10d, cuda_device=0),
                                clock=clock, realtime=clock)
    return s, clock


def _run(tmp_path: Path) -> Run:
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))


def test_the_window_s_calls_become_rows_of_the_rank(tmp_path: Path) -> None:
    t0 = FakeClock().t
    # one all-reduce in the middle of each of 10 steps (boundary k at t0 + k * STEP)
    entries = [_entry(t0 + k * STEP + STEP // 2, seq=k + 1) for k in range(10)]
    s, clock = _session(tmp_path, "2-4", FakeC10d(_dump_nccl_trace=pickled(entries)))
    s.begin()
    run_steps(s, clock, 10)
    s.finish()
    run = _run(tmp_path)
    rows = run.query("SELECT seq, op, bytes, pg_ranks, device, dur_ns, ts_ns - host_ts_ns AS d, "
                     "source FROM collectives ORDER BY seq").to_pylist()
    # the window: boundary 2 (opens) to boundary 5 (closes): the calls of steps 2, 3 and 4
    assert [r["seq"] for r in rows] == [3, 4, 5]
    assert {(r["op"], r["bytes"], tuple(r["pg_ranks"]), r["device"], r["dur_ns"], r["d"],
             r["source"]) for r in rows} == {("all_reduce", 2000, (0, 1), 0, 0, 0, "flight_recorder")}
    fr = run.manifest.settings["ranks"]["rank0"]["flight_recorder"]
    assert fr["rows"] == 3 and fr["before_window"] == 2 and fr["after_window"] == 5


def test_a_program_ending_inside_the_window_keeps_its_calls(tmp_path: Path) -> None:
    t0 = FakeClock().t
    entries = [_entry(t0 + k * STEP + 1, seq=k + 1) for k in range(6)]
    s, clock = _session(tmp_path, "2-50", FakeC10d(_dump_nccl_trace=pickled(entries)))
    s.begin()
    run_steps(s, clock, 6)
    s.finish("exception: RuntimeError")  # the excepthook/atexit path: the window closes first
    # open at boundary 2 (t0 + 2 steps), closed by the end at t0 + 6 steps: calls k = 2..5
    assert _run(tmp_path).query("SELECT list(seq ORDER BY seq) AS s FROM collectives"
                                ).to_pylist() == [{"s": [3, 4, 5, 6]}]


def test_without_a_window_the_tail_keeps_its_calls(tmp_path: Path) -> None:
    t0 = FakeClock().t
    entries = [_entry(t0 + 5, seq=1), _entry(t0 + 2 * STEP, seq=2)]
    s, clock = _session(tmp_path, "20-30", FakeC10d(_dump_nccl_trace=pickled(entries)))
    s.begin()
    run_steps(s, clock, 4)  # the program ends before the window's first step
    s.finish()
    assert _run(tmp_path).query("SELECT count(*) AS n FROM collectives").to_pylist() == [{"n": 2}]


def test_a_read_that_fails_is_a_diagnostic_not_an_exception(tmp_path: Path) -> None:
    s, clock = _session(tmp_path, "1-2", FakeC10d())

    class Broken(FlightRecorderTap):
        def take(self, rank: int, lo: int, hi: int) -> Any:
            raise MemoryError("dump too big")

    s.comms = Broken(True, {}, modules={})
    s.begin()
    run_steps(s, clock, 5)
    s.finish()
    run = _run(tmp_path)
    assert any(d.code == "flight_recorder_failed" and "dump too big" in d.message
               for d in run.manifest.diagnostics)
    assert "collectives" not in run.manifest.tables or run.table("collectives").num_rows == 0


def test_switched_off_nothing_is_read(tmp_path: Path) -> None:
    t0 = FakeClock().t
    entries = [_entry(t0 + k * STEP + 1, seq=k + 1) for k in range(6)]
    s, clock = _session(tmp_path, "1-3", FakeC10d(_dump_nccl_trace=pickled(entries)),
                        flight_recorder=False)
    s.begin()
    run_steps(s, clock, 6)
    s.finish()
    run = _run(tmp_path)
    assert run.manifest.settings["ranks"]["rank0"]["flight_recorder"] == {"state": "off"}
    assert "collectives" not in run.manifest.tables or run.table("collectives").num_rows == 0


def test_the_torch_backend_leaves_the_collectives_to_its_trace(tmp_path: Path) -> None:
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), gpu="torch")
    s = Session(cfg, clock=FakeClock(), environ={}, host_factory=lambda c, r, clk: FakeHost(clk),
                poll_s=None)
    assert not s.comms.enabled and s.comms.status["state"] == "off"
    assert "record_param_comms" in s.comms.status["why"]
    on = Session(CaptureConfig(staging=str(tmp_path / "s2"), gpu="none"), clock=FakeClock(),
                 environ={}, host_factory=lambda c, r, clk: FakeHost(clk), poll_s=None)
    assert on.comms.enabled


PROGRAM = """
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(8):
    model(torch.ones(3, 4)).sum().backward()
    dist.all_reduce(model.weight.grad)
    opt.step()
    opt.zero_grad()
print("steps done", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"))
sys.exit(3)  # inside the window (steps 2-50): the window closes at exit
"""


def test_a_recorded_program_keeps_its_output_and_status_and_its_collectives(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("torch.distributed")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items()
           if "BUFFER_SIZE" not in k and k not in ("STEPSCOPE_CAPTURE", "RANK", "WORLD_SIZE")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    plain = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    rec = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"),
                          "--quiet", "--steps", "2-50", "--backend", "none", "--no-stacks", "--",
                          str(script)], env={**env, "PYTHONPATH": src}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert plain.returncode == rec.returncode == 3
    assert rec.stdout == plain.stdout == "steps done None\n"
    assert "deprecated" not in rec.stderr
    run = Run(tmp_path / "run")
    rows = run.query("SELECT list(seq ORDER BY seq) AS seq, list(DISTINCT bytes) AS b, "
                     "list(DISTINCT name) AS name FROM collectives").to_pylist()
    # the all-reduce of the 2x4 float gradient in iterations 3..7 (boundary 2 is the end of
    # iteration 2; the window ends with the program)
    assert rows == [{"seq": [4, 5, 6, 7, 8], "b": [32], "name": ["gloo:all_reduce"]}]
