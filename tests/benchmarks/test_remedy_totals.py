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


def test_the_share_given_the_measured_baseline_counts_every_scored_row(tmp_path: Path) -> None:
    # share_ratio: the report's share applied to the measured baseline; traps, unstable rows
    # and rows without one (nothing offered) are left out
    def row(share: float | None, trap: bool = False, **kw: Any) -> dict[str, Any]:
        return {**_row(1.0, trap=trap), "share_ratio": share, **kw}

    a = {"scenario": "h", "remedy_score": {"record": [row(1.2), row(1.4)],
                                           "profiler": [row(0.75), row(0.5), row(None)]}}
    b = {"scenario": "p", "remedy_score": {"record": [row(3.0, unstable="x")],
                                           "profiler": [row(1.0), row(9.0, True)]}}
    assert remedy_totals.share_text([a, b], "record") == "1/2"
    assert remedy_totals.share_text([a, b], "profiler") == "2/3"
    assert remedy_totals.share_text([b], "record") == "nothing scored"
    lines = remedy_totals.share_table([("x", [a]), ("y", [b])])
    assert lines[2:] == ["| x | 1/2 | 1/2 |", "| y | nothing scored | 1/1 |",
                         "| **all** | 1/2 | 2/3 |"]


def test_rows_the_harness_cannot_time_are_left_out_of_the_third_table() -> None:
    # loader_tf32: "both" and "tf32" timed by their own programs, "loader" by the harness
    # only; another scenario keeps every row
    def row(variant: str) -> dict[str, Any]:
        return {**_row(1.0), "variant": variant}

    loader = {"scenario": "loader_tf32",
              "timing": {"source": "program.py", "baseline_ms": 27.8,
                         "variants": {"both": {"fixed_ms": 4.7}, "tf32": {"fixed_ms": 20.8}}},
              "variants": {"both": {"fixed_ms": 3.1}, "loader": {"fixed_ms": 11.3},
                           "tf32": {"fixed_ms": 17.0}},
              "timing_harness": {"baseline_ms": 25.0},
              "remedy_score": {"record": [row("both"), row("loader"), row("tf32")],
                               "profiler": None}}
    kept = remedy_totals.program_timed(loader)
    assert [r["variant"] for r in kept["remedy_score"]["record"]] == ["both", "tf32"]
    assert kept["remedy_score"]["profiler"] is None
    # timed by the harness alone: nothing of it is left
    harness = {**loader, "timing": {"baseline_ms": 25.0}}
    assert remedy_totals.program_timed(harness)["remedy_score"]["record"] == []
    other = {**harness, "scenario": "sync_tf32"}
    assert remedy_totals.program_timed(other) is other


def test_choices_count_pairs_of_fixes_measured_apart_in_the_predicted_order() -> None:
    def row(variant: str, measured: float, predicted: float, *, trap: bool = False,
            check: str = "remedy") -> dict[str, Any]:
        return {**_row(1.0, trap=trap), "variant": variant, "check": check,
                "measured_fixed_ms": measured, "predicted_fixed_ms": predicted}

    # TF32 faster than bf16 as measured, predicted so; bf16 and bf16 + channels_last predicted
    # alike (a tie is not an order); a trap and a plan row of a variant already seen are
    # not counted; TF32 and the channels_last one measured within 5%: not compared
    conv = {"scenario": "conv", "remedy_score": {
        "record": [row("tf32", 3.1, 2.9), row("bf16", 3.7, 3.3), row("bf16_cl", 3.2, 3.3),
                   row("bf16", 3.7, 1.0, check="plan"), row("trap", 9.0, 1.0, trap=True)],
        "profiler": [row("tf32", 3.1, 3.5), row("bf16", 3.7, 3.3)]}}
    assert remedy_totals.choice_text([conv], "record") == "1/2"
    assert remedy_totals.choice_text([conv], "profiler") == "0/1"
    assert remedy_totals.choice_text([{"scenario": "x", "remedy_score": {}}], "record") \
        == "nothing compared"


def test_each_fix_across_suites_takes_the_median_of_its_calls() -> None:
    # three calls of one fix: ratios 0.9, 1.5, 1.1 -> median 1.10, range 0.90-1.50, 2 of 3
    # within ±30%; a trap, an unstable row and a row with no prediction are not calls
    def row(variant: str, ratio: float | None, **kw: Any) -> dict[str, Any]:
        return {**_row(ratio), "variant": variant, "predicted_fixed_ms": 1.0,
                "measured_fixed_ms": 1.0, **kw}

    def res(rows: list[dict[str, Any]], profiler: list[dict[str, Any]] | None = None
            ) -> dict[str, Any]:
        return {"scenario": "sync", "remedy_score": {"record": rows, "profiler": profiler}}

    suites = [("a", [res([row("fixed", 0.9), row("trapped", 0.1, trap=True)])]),
              ("b", [res([row("fixed", 1.5), row("fixed", 0.2)],
                         [row("fixed", 1.45), row("other", 2.0, unstable="runs 1-3 ms")])]),
              ("c", [res([row("fixed", 1.1), row("none", None)])])]
    got = remedy_totals.per_fix(suites)
    assert got == {("sync", "fixed", "record"): [0.9, 1.5, 1.1],
                   ("sync", "fixed", "profiler"): [1.45]}
    lines = remedy_totals.per_fix_table(suites)
    assert lines[2:] == ["| sync | fixed | profiler | 1 | 1.45 **(off ±20%)** | 1.45-1.45 | 0/1 |",
                         "| sync | fixed | record | 3 | 1.10 | 0.90-1.50 | 2/3 |"]


def test_the_in_place_pinned_variant_of_older_calls_keeps_its_own_name() -> None:
    # before 2026-11-27 cpu_ops_midstep's "pinned" sorted in place: a result without a
    # "pinned_inplace" variant counts its "pinned" row as that; a newer one keeps the name
    def res(variants: list[str]) -> dict[str, Any]:
        return {"scenario": "cpu_ops_midstep", "variants": {v: {} for v in variants},
                "remedy_score": {"record": [{**_row(1.2), "variant": "pinned",
                                             "predicted_fixed_ms": 1.2,
                                             "measured_fixed_ms": 1.0}], "profiler": None}}

    got = remedy_totals.per_fix([("old", [res(["gpu_sort", "pinned"])]),
                                 ("new", [res(["gpu_sort", "pinned", "pinned_inplace"])])])
    assert got == {("cpu_ops_midstep", "pinned_inplace", "record"): [1.2],
                   ("cpu_ops_midstep", "pinned", "record"): [1.2]}
