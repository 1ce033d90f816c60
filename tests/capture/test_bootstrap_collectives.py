"""The session writes the window's collectives (flight recorder) into its partition: when the
window closes, when the program ends inside it, for the tail when no window opened; a failing
read is a diagnostic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.flight_recorder import FlightRecorderTap
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.store.run import Run
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps
from tests.capture.test_flight_recorder import FakeC10d, modules, pickled

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
