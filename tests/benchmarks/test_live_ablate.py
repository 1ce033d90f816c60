"""benchmarks/capture/live_ablate.py (issue 24: where ``record --live``'s step time goes): its
phase-by-phase analysis on hand-built stamps, its summary, and one short toggled run on the CPU
(the GPU call must not be where its coupling to ``cli.live.LiveView`` breaks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH / "capture") not in sys.path:
    sys.path.insert(0, str(BENCH / "capture"))

import live_ablate


def stamps(t0: float, ms: float, n: int) -> list[float]:
    return [t0 + i * ms / 1e3 for i in range(n + 1)]


def test_steps_fall_into_their_phase_and_each_mode_is_compared_with_its_cycles_off() -> None:
    # cycle 0: off [0, 1) at 10 ms steps, full [1, 2) at 11 ms; cycle 1: full [2, 3) at 12 ms,
    # off [3, 4) at 10 ms. Steps starting in the first 0.15 s of a phase, or crossing into the
    # next, are not counted.
    phases = [{"cycle": 0, "mode": "off", "t0": 0.0, "t1": 1.0},
              {"cycle": 0, "mode": "full", "t0": 1.0, "t1": 2.0},
              {"cycle": 1, "mode": "full", "t0": 2.0, "t1": 3.0},
              {"cycle": 1, "mode": "off", "t0": 3.0, "t1": 4.0}]
    ends = (stamps(0.0, 10, 100)[:-1] + stamps(1.0, 11, 90)[:-1] + stamps(2.0, 12, 83)[:-1]
            + stamps(3.0, 10, 100))
    got = live_ablate.toggled(ends, phases)
    assert got["cycles"] == 2
    assert got["full"]["vs_off"] == {"median": pytest.approx(1.15), "min": pytest.approx(1.1),
                                     "max": pytest.approx(1.2), "n": 2}
    # means: each full phase's last step runs to the next phase's first stamp (1.979 -> 2.0:
    # 21 ms; 2.984 -> 3.0: 16 ms): (75 x 11 + 21) / 76 / 10 and (69 x 12 + 16) / 70 / 10
    assert got["full"]["mean_vs_off"]["median"] == pytest.approx(
        ((75 * 11 + 21) / 76 / 10 + (69 * 12 + 16) / 70 / 10) / 2, abs=1e-4)
    detail = live_ablate.per_phase(ends, phases)
    assert [(d["mode"], d["steps"], d["median_ms"]) for d in detail] == [
        ("off", 85, pytest.approx(10.0)), ("full", 76, pytest.approx(11.0)),
        ("full", 70, pytest.approx(12.0)), ("off", 85, pytest.approx(10.0))]
    assert got["off"]["median_ms"] == pytest.approx(10.0)
    # off: 85 steps a phase start at >= 0.15 s (steps 15..99); full: 11 ms steps from 1.155 s
    # to 1.99 s (76) and 12 ms steps from 2.16 s to 2.988 s whose ends are <= 3.0 (70)
    assert got["off"]["steps"] == 2 * 85
    assert got["full"]["steps"] == 76 + 70


def test_the_summary_pairs_each_configuration_with_record_in_its_round() -> None:
    rows = [{"config": "record", "round": 0, "median_ms": 20.0},
            {"config": "record-live", "round": 0, "median_ms": 21.0},
            {"config": "record", "round": 1, "median_ms": 22.0},
            {"config": "record-live", "round": 1, "median_ms": 22.0},
            {"config": "record-live", "toggle": {"cycles": 1, "off": {"median_ms": 1.0},
                                                 "full": {"vs_off": {"median": 1.01}}}}]
    s = live_ablate.summarise(rows)
    assert s["median_ms"] == {"record": 21.0, "record-live": 21.5}
    assert s["paired record-live/record"] == {"median": 1.025, "min": 1.0, "max": 1.05, "n": 2}
    assert s["toggled"] == {"full": {"median": {"median": 1.01}, "mean": None}}


def test_a_short_toggled_run_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "ablate.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(live_ablate.__file__).resolve().parents[2] / "src"),
         os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, live_ablate.__file__, "--workload", "sleep",
                    "--toggle-seconds", "3", "--phase-s", "0.25", "--rounds", "0",
                    "--out", str(out)], check=True, timeout=240, env=env,
                   stdout=subprocess.DEVNULL)
    (row,) = json.loads(out.read_text())["rows"]
    assert row["config"] == "record-live" and "note" not in row  # the panel was drawn
    assert row["phases"] >= 5 and len(row["per_phase"]) == row["phases"]
    cpu = row["recorder_threads_cpu_s"]
    assert {"main", "_refresh_loop", "_phases", "run"} <= set(cpu)  # run: the relay
    assert all(isinstance(v, float) for v in cpu.values())
    modes = {m for m in row["toggle"] if m != "cycles"}
    assert "off" in modes and len(modes) >= 3
