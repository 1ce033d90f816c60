"""benchmarks/scenarios/log_calibration.py: reading a program's log line, and its table (the
GPU part runs on a GPU only: docs/accuracy.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import log_calibration as lc
import record_report as rr


def test_ms_per_step_reads_the_closing_line() -> None:
    text = ("warming up\nprogram.py: graphs_pageable (baseline, cuda): 300 steps in 7.31 s, "
            "24.367 ms/step, 921 minor page faults/step\n")
    assert rr.ms_per_step(text) == 24.367
    assert rr.ms_per_step("no closing line") is None


def test_table_rows() -> None:
    rows = [{"scenario": "a", "variant": "fixed", "remedy_ids": ["cuda_graphs"],
             "log_baseline_ms": 20.0, "log_fixed_ms": 2.5, "predicted_ms": 2.6,
             "from": "remedy cuda_graphs", "ratio": 1.04, "ok": True,
             "calibration": {"reached": True, "scaled": "host", "factor": 1.3},
             "default_ratio": 1.4, "default_ok": False},
            {"scenario": "b", "error": "RuntimeError: record exited with 2"}]
    lines = lc.table(rows)
    assert lines[2] == ("| a | fixed (cuda_graphs) | 20.00 → 2.50 | host x1.3 | "
                        "2.60 (remedy cuda_graphs) | 1.04 | yes | 1.4 off |")
    assert lines[3] == "| b | – | – | – | RuntimeError: record exited with 2 | – | – | – |"


def test_steady_ms_prefers_the_steady_line() -> None:
    text = ("program.py: steady: 20.580 ms/step over the last 250 steps\n"
            "program.py: dataloader_bound (baseline, cuda): 300 steps in 6.23 s, 20.752 "
            "ms/step, 4387 minor page faults/step\n")
    assert rr.steady_ms(text) == 20.58
    assert rr.ms_per_step(text) == 20.752
    assert rr.steady_ms(text.splitlines()[1]) == 20.752  # no steady line: the closing one


def test_logs_alternate_the_order_and_keep_every_run(monkeypatch: Any, tmp_path: Path) -> None:
    ran: list[str] = []

    def fake(cmd: list[str], log: Path) -> str:
        name = cmd[cmd.index("--variant") + 1] if "--variant" in cmd else "base"
        assert cmd[cmd.index("--warmup-steps") + 1] == "5"
        ran.append(name)
        return f"program.py: steady: {len(ran)}.0 ms/step over the last 5 steps\n"

    monkeypatch.setattr(lc, "_run", fake)
    got = lc.logs(["python", "program.py", "x"], [None, "a", "b"], tmp_path / "x.log", 10, 5, 3)
    assert ran == ["base", "a", "b", "b", "a", "base", "base", "a", "b"]
    assert got == {None: [1.0, 6.0, 7.0], "a": [2.0, 5.0, 8.0], "b": [3.0, 4.0, 9.0]}



def test_the_out_folder_must_be_new_or_empty(tmp_path: Path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("the user's")
    assert lc.main(["--out", str(used), "healthy"]) == 2
    assert (used / "mine.txt").read_text() == "the user's"
    assert not (used / "runs").exists()
