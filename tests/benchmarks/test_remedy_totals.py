"""benchmarks/scenarios/remedy_totals.py: the re-scored suites' remedy counts side by side."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import remedy_totals


def _row(ratio: float | None, *, trap: bool = False, ok: bool | None = None) -> dict[str, Any]:
    good = ok if ok is not None else ratio is not None and abs(ratio - 1) <= 0.3
    return {"variant": "fixed", "check": "remedy", "source": "remedy x", "trap": trap,
            "step_ms": None if ratio is None else 1.0, "ratio": ratio, "ok": good,
            "on_target": ratio is not None and abs(ratio - 1) <= 0.2}


def _suite(tmp: Path, name: str, record: list[dict[str, Any]] | None,
           profiler: list[dict[str, Any]]) -> str:
    d = tmp / name
    d.mkdir()
    res = {"scenario": "s", "remedy_score": {"record": record, "profiler": profiler}}
    (d / "results.json").write_text(json.dumps({"meta": {}, "scenarios": [res]}))
    return f"{name}={d}"


def test_totals_per_suite_and_all(tmp_path: Path, capsys: Any) -> None:
    a = _suite(tmp_path, "a", [_row(1.1), _row(1.5)], [_row(0.9), _row(None)])
    b = _suite(tmp_path, "b", None, [_row(1.25), _row(0.0, trap=True, ok=True)])
    assert remedy_totals.main([a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("| a | within ±30% 1/2 (±20%: 1), not offered 0 | within ±30% 1/2 "
                        "(±20%: 1), not offered 1 |")
    assert lines[3] == ("| b | nothing scored | within ±30% 1/1 (±20%: 0), not offered 0, "
                        "traps ok 1/1 |")
    assert lines[4] == ("| **all** | within ±30% 1/2 (±20%: 1), not offered 0 | within ±30% "
                        "2/3 (±20%: 1), not offered 1, traps ok 1/1 |")


def test_a_folder_without_results_is_an_error(tmp_path: Path, capsys: Any) -> None:
    assert remedy_totals.main([f"x={tmp_path}"]) == 2
    assert "results.json" in capsys.readouterr().err
    assert remedy_totals.main([]) == 2
