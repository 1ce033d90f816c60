"""benchmarks/scenarios/diff_suite.py: its scoring, table and merge (pure; the GPU runs are the
lead's), and that every scenario of the suite has an expected category."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import diff_suite as ds
import timing


def _diff(verdict: str, deltas: dict[str, float]) -> dict[str, Any]:
    return {"verdict": verdict, "categories": {c: {"delta_ms": v} for c, v in deltas.items()},
            "step_ms": {"base": 10.0, "new": 6.0, "change_pct": -40.0,
                        "interval": [-42.0, -38.0]}}


def test_every_scenario_has_an_expectation() -> None:
    assert set(ds.EXPECT) == set(timing.SCENARIOS)


def test_score_needs_faster_and_the_right_category_losing_most() -> None:
    good = _diff("faster", {"input_wait": -4.0, "compute": 0.1, "idle": -0.2})
    assert ds.score("dataloader_bound", good)["ok"]
    wrong = _diff("faster", {"input_wait": -0.1, "compute": -3.0})
    assert not ds.score("dataloader_bound", wrong)["ok"]
    assert not ds.score("dataloader_bound", _diff("inconclusive", {"input_wait": -4.0}))["ok"]
    assert ds.score("healthy", _diff("same", {"compute": -0.01}))["ok"]
    assert not ds.score("healthy", _diff("slower", {"compute": 1.0}))["ok"]
    assert not ds.score("small_grid", None)["ok"]


def test_score_reads_the_causes_where_the_diff_has_them() -> None:
    # host_python recorded: the breakdown calls the host's Python 'idle'; the causes 'host'
    d = _diff("faster", {"idle": -4.5, "compute": 0.1})
    d["causes"] = {"host": {"delta_ms": -4.4}, "compute": {"delta_ms": 0.1}}
    s = ds.score("host_python", d)
    assert s["ok"] and s["top"] == "host" and s["top_category"] == "idle"
    del d["causes"]
    assert not ds.score("host_python", d)["ok"]  # an older diff: its categories


def test_table_and_merge(tmp_path: Path) -> None:
    d = _diff("faster", {"input_wait": -4.0})
    results = {"dataloader_bound": {"diff": {"diff": d}, "score": ds.score("dataloader_bound", d)},
               "small_grid": {"error": "not run (--budget)"}}
    text = ds.table(results)
    assert "| dataloader_bound | faster | 10.00 -> 6.00 (-40.0%, -42.0% .. -38.0%) | " \
           "input_wait (-4.00) | input_wait (-4.00) | input_wait | yes |" in text
    assert "| small_grid | - | not run (--budget) |" in text and "1 of 2 scenarios pass" in text
    for i, (k, v) in enumerate(results.items()):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "results.json").write_text(json.dumps({"scenarios": {k: v}}))
    assert ds.main(["--merge", f"{tmp_path / 'r0'},{tmp_path / 'r1'}",
                    "--out", str(tmp_path / "all")]) == 0
    assert (tmp_path / "all" / "diff_suite.md").read_text() == text
