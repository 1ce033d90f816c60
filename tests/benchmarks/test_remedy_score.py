"""benchmarks/scenarios: fix variants (variants.py), the interleaved timing of several variants
(timing.time_many), scoring the report's remedies against measured variants (remedy_score.py,
with a stand-in report carrying the issue-22 fields) and its markdown (remedy_report.py)."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import remedy_report
import remedy_score as rs
import timing
import variants

# -- variants -------------------------------------------------------------------------------


def _mod(**decl: Any) -> types.ModuleType:
    m = types.ModuleType("fake_scenario")
    for k, v in decl.items():
        setattr(m, k, v)
    return m


def test_variants_from_declarations() -> None:
    plain = variants.variants_of(_mod())
    assert plain == (variants.Variant("fixed", ()),)
    one = variants.variants_of(_mod(FIX_REMEDIES=("pinned_copies",)))
    assert one == (variants.Variant("fixed", ("pinned_copies",), covers=("pinned_copies",)),)
    many = variants.variants_of(_mod(
        VARIANTS={"gpu_sort": ("remove_round_trip",), "pinned": ("pinned_copies",)},
        TRAPS=("pinned",), PLAN_COVERS={"gpu_sort": ("remove_round_trip", "remove_syncs")}))
    assert [v.name for v in many] == ["gpu_sort", "pinned"]
    assert many[0].covers == ("remove_round_trip", "remove_syncs") and not many[0].trap
    assert many[1].trap and many[1].covers == ("pinned_copies",)
    with pytest.raises(ValueError, match="unknown remedies"):
        variants.variants_of(_mod(VARIANTS={"x": ("make_it_fast",)}))


def test_pick_and_build_arg() -> None:
    declared = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",)}
    assert variants.pick(False, declared) is None
    assert variants.pick(True, declared) == "tf32"
    assert variants.pick("bf16_amp", declared) == "bf16_amp"
    with pytest.raises(ValueError, match="unknown variant"):
        variants.pick("fp8", declared)
    multi, single = _mod(VARIANTS=declared), _mod(FIX_REMEDIES=("tf32",))
    assert variants.build_arg(multi, "bf16_amp") == "bf16_amp"
    assert variants.build_arg(single, "fixed") is True
    assert variants.build_arg(single, None) is False
    with pytest.raises(ValueError):
        variants.build_arg(single, "bf16_amp")


def test_scenario_modules_declare_known_remedies() -> None:
    pytest.importorskip("torch")
    import importlib

    seen = {}
    for name in timing.SCENARIOS:
        if name.startswith("jax_"):
            continue
        seen[name] = variants.variants_of(importlib.import_module(name))
    assert [v.name for v in seen["conv_fp32"]] == ["tf32", "bf16_amp", "bf16_amp_channels_last"]
    assert seen["conv_fp32"][2].remedies == ("bf16_amp", "channels_last")
    assert [(v.name, v.trap) for v in seen["item_trap"]] == [("cuda_graphs", False),
                                                             ("remove_syncs", True)]
    assert seen["item_trap"][1].remedies == ("remove_round_trip",)  # the .item() reads
    assert seen["item_every_step"][0].remedies == ("remove_round_trip",)
    assert seen["cpu_ops_midstep"][0].remedies == ("ops_to_gpu",)
    assert seen["cpu_ops_midstep"][0].covers == ("ops_to_gpu", "remove_round_trip",
                                                 "pinned_copies", "remove_syncs")
    assert seen["launch_bound"][0].remedies == ("cuda_graphs",)
    assert seen["healthy"][0].remedies == ()
    # the pinned round trip applies the remedy alone; the in-place sort applies none
    pinned = {v.name: v.remedies for v in seen["cpu_ops_midstep"]}
    assert pinned["pinned"] == ("pinned_copies",) and pinned["pinned_inplace"] == ()
    # every renamed variant names a variant its scenario declares now
    for (scenario, old_name), new_name in variants.RENAMED.items():
        declared = [v.name for v in seen[scenario]]
        assert new_name in declared and old_name in declared


def test_program_runs_a_named_variant(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    import program

    assert program.main(["fp32_no_tf32", "--variant", "bf16_amp", "--device", "cpu",
                         "--steps", "2"]) == 0
    assert "program.py: fp32_no_tf32 (variant bf16_amp, cpu): 2 steps" in capsys.readouterr().out
    assert program.main(["fp32_no_tf32", "--device", "cpu", "--steps", "3",
                         "--warmup-steps", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("program.py: steady: ") and out[-2].endswith(
        " ms/step over the last 2 steps")
    assert out[-1].startswith("program.py: fp32_no_tf32 (baseline, cpu): 3 steps")
    assert program.main(["fp32_no_tf32", "--variant", "fp8", "--device", "cpu"]) == 2
    assert "no variant 'fp8'; known: tf32, bf16_amp" in capsys.readouterr().err
    assert program.main(["item_trap", "--device", "cpu", "--steps", "2"]) == 0  # baseline
    assert program.main(["item_trap", "--fixed", "--device", "cpu"]) == program.EXIT_SKIPPED


# -- timing several variants ------------------------------------------------------------------


class Sleeper:
    """A step runner that sleeps ``ms`` per step and logs which runner ran."""

    def __init__(self, name: str, ms: float, calls: list[str]) -> None:
        self.name, self.ms, self.calls = name, ms, calls

    def __call__(self) -> None:
        self.calls.append(self.name)
        time.sleep(self.ms / 1e3)

    def sync(self) -> None:
        pass


def test_time_many_interleaves_and_reverses_every_other_round() -> None:
    calls: list[str] = []
    runners = {"baseline": Sleeper("B", 4.0, calls), "a": Sleeper("A", 1.0, calls),
               "b": Sleeper("C", 2.0, calls)}
    mt = timing.time_many(runners, rounds=4, steps=2, warmup=1, log=lambda _m: None)
    assert calls[:3] == ["B", "A", "C"]  # warm-up, one step each
    timed = calls[3:]
    assert timed == (["B"] * 2 + ["A"] * 2 + ["C"] * 2 + ["C"] * 2 + ["A"] * 2 + ["B"] * 2) * 2
    assert mt.order == [["baseline", "a", "b"], ["b", "a", "baseline"]] * 2
    assert all(len(v) == 4 for v in mt.blocks_ms.values())
    assert mt.median("baseline") > mt.median("b") > mt.median("a")
    pair = mt.pair("a")
    assert pair.order == ["BF", "FB", "BF", "FB"]
    assert pair.saving_ms == pytest.approx(mt.median("baseline") - mt.median("a"))
    d = mt.variant_dict("b")
    assert d["fixed_ms"] == round(mt.median("b"), 4) and len(d["blocks_ms"]) == 4
    assert mt.to_dict()["order"] == ["BVV", "VVB", "BVV", "VVB"]


def test_time_runners_keeps_the_two_variant_order() -> None:
    calls: list[str] = []
    t = timing.time_runners(Sleeper("B", 1.0, calls), Sleeper("F", 0.5, calls), rounds=2,
                            steps=1, warmup=1, log=lambda _m: None)
    assert calls == ["B", "F", "B", "F", "F", "B"]
    assert t.order == ["BF", "FB"] and len(t.baseline_blocks_ms) == 2


# -- a stand-in report with the issue-22 fields ---------------------------------------------


def stand_in_report(**over: Any) -> dict[str, Any]:
    """What a report with remedies looks like (issue 22's field names); captured step 20 ms."""
    rep: dict[str, Any] = {
        "summary": {"step_ms": {"mean": 25.0, "median": 24.0}},
        "step_model": {"measured_ms": 20.0, "replayed_ms": 20.5, "error_pct": 2.5, "rank": 0},
        "remedies": [
            # from a profiler trace: relative to the step predicted without the profiler
            {"id": "tf32", "title": "TF32", "finding_ids": ["no_tensor_cores"],
             "baseline_ms": 16.0, "predicted_step_ms": 8.0, "est_saving_ms": 8.0,
             "est_saving_pct": 50.0, "options": [],
             "assumptions": ["cuBLAS picks TF32 kernels"]},
            # the remedy's own figure is its best option's (bf16 + channels_last)
            {"id": "bf16_amp", "title": "bf16 autocast", "finding_ids": ["no_tensor_cores"],
             "baseline_ms": 20.0, "predicted_step_ms": 5.0, "est_saving_ms": 15.0,
             "est_saving_pct": 75.0, "option": "channels_last",
             "options": [{"name": "bf16_amp", "predicted_step_ms": 8.0},
                         {"name": "channels_last", "predicted_step_ms": 5.0}],
             "assumptions": []},
            {"id": "remove_syncs", "title": "remove syncs", "finding_ids": ["sync_calls"],
             "predicted_step_ms": 19.6, "est_saving_ms": 0.4, "est_saving_pct": 2.0,
             "options": [], "assumptions": []},
            {"id": "pinned_copies", "title": "pinned", "finding_ids": ["pageable_memcpy"],
             "predicted_step_ms": None, "est_saving_ms": 5.0, "est_saving_pct": 25.0,
             "options": [], "assumptions": []},
        ],
        "plan": {"baseline_ms": 20.0, "predicted_step_ms": 3.75,
                 "remedy_ids": ["bf16_amp", "remove_syncs"],
                 "options": ["channels_last", "remove_syncs"]},
    }
    rep.update(over)
    return rep


def test_remedy_fields_captured_step_and_fallbacks() -> None:
    f = rs.remedy_fields(stand_in_report())
    assert f["captured_step_ms"] == 20.0 and f["captured_from"] == "step_model.measured_ms"
    assert [r["id"] for r in f["remedies"]] == ["tf32", "bf16_amp", "remove_syncs",
                                                "pinned_copies"]
    old = rs.remedy_fields({"summary": {"step_ms": {"mean": 25.0}}, "findings": []})
    assert old["captured_step_ms"] == 25.0 and old["remedies"] == [] and old["plan"] is None
    assert rs.remedy_fields(None) == {}


def test_predict_by_remedy_option_restricted_plan_and_plan() -> None:
    f = rs.remedy_fields(stand_in_report())
    assert rs.predict(f, ("tf32",)) == rs.Prediction(8.0, "remedy tf32", ("tf32",), 16.0)
    # bf16 alone: its own option, not the remedy's best (which adds channels_last)
    assert rs.predict(f, ("bf16_amp",)) == rs.Prediction(8.0, "option bf16_amp of bf16_amp",
                                                         ("bf16_amp",), 20.0)
    # no predicted_step_ms: the captured step less est_saving_pct (20 x 0.75)
    assert rs.predict(f, ("pinned_copies",)).step_ms == pytest.approx(15.0)
    # an option that names the second remedy of a pair
    both = rs.predict(f, ("bf16_amp", "channels_last"))
    assert (both.step_ms, both.source) == (5.0, "option channels_last of bf16_amp")
    # a single id offered only as an option
    assert rs.predict(f, ("channels_last",)).source == "option channels_last of bf16_amp"
    # options that name the whole combination, by id or by remedy_ids, under another remedy
    tf32_opts = [{"id": "bf16_amp+channels_last", "predicted_step_ms": 4.5},
                 {"id": "fp16", "remedy_ids": ["bf16_amp"], "predicted_step_ms": 7.5}]
    h = dict(f, remedies=[dict(f["remedies"][0], options=tf32_opts)])
    assert rs.predict(h, ("bf16_amp", "channels_last")) == rs.Prediction(
        4.5, "option bf16_amp+channels_last of tf32", ("bf16_amp", "channels_last"), 16.0)
    assert rs.predict(h, ("bf16_amp",)).step_ms == 7.5
    # a plan restricted to the ids wins over everything but a single remedy
    g = dict(f, plans=[{"remedy_ids": ["bf16_amp", "channels_last"], "predicted_step_ms": 6.0}])
    assert rs.predict(g, ("bf16_amp", "channels_last")).step_ms == 6.0
    # several ids, no option or subset: the plan, when all its remedies are covered
    p = rs.predict(f, ("remove_round_trip", "remove_syncs"),
                   covers=("remove_round_trip", "remove_syncs", "bf16_amp"))
    assert (p.step_ms, p.source, p.remedy_ids) == (3.75, "plan", ("bf16_amp", "remove_syncs"))
    not_covered = rs.predict(f, ("remove_round_trip", "remove_syncs"))
    assert not_covered.step_ms is None and not_covered.source == "not offered"
    assert rs.predict(f, ("cuda_graphs",)).source == "not offered"


def test_score_row_tolerance_and_trap() -> None:
    # captured 20 ms, predicted 10 -> half of the measured baseline 12 ms = 6 ms
    pred = rs.Prediction(10.0, "remedy tf32", ("tf32",))
    ok = rs.score_row(pred, baseline_ms=12.0, fixed_ms=5.0, saving_pct=58.3, captured_ms=20.0,
                      trap=False)
    assert ok["predicted_fixed_ms"] == 6.0 and ok["predicted_saving_pct"] == 50.0
    assert ok["ratio"] == 1.2 and ok["ok"] and ok["on_target"]
    # informative: the report's 10 ms against the measured 5 ms fixed step, its 20 ms base
    # against the measured 12 ms baseline (not part of ok)
    assert ok["direct_ratio"] == 2.0 and ok["base_ratio"] == round(20.0 / 12.0, 3)
    loose = rs.score_row(pred, baseline_ms=12.0, fixed_ms=4.8, saving_pct=60.0,
                         captured_ms=20.0, trap=False)
    assert loose["ratio"] == 1.25 and loose["ok"] and not loose["on_target"]
    off = rs.score_row(pred, baseline_ms=12.0, fixed_ms=4.0, saving_pct=66.7,
                       captured_ms=20.0, trap=False)
    assert off["ratio"] == 1.5 and not off["ok"]
    none = rs.score_row(rs.Prediction(None, "not offered"), baseline_ms=12.0, fixed_ms=6.0,
                        saving_pct=50.0, captured_ms=20.0, trap=False)
    assert none["ratio"] is None and not none["ok"]
    # a calibrated report predicts absolute steps: its 6 ms against the measured 5 ms, whatever
    # its baseline (here 20 ms against the harness's 12 ms)
    cal = rs.score_row(rs.Prediction(6.0, "remedy tf32", ("tf32",), 20.0), baseline_ms=12.0,
                       fixed_ms=5.0, saving_pct=58.3, captured_ms=20.0, trap=False,
                       absolute=True)
    assert cal["predicted_fixed_ms"] == 6.0 and cal["ratio"] == 1.2 and cal["ok"]
    # ... beside its share of its own 20 ms applied to the measured 12 ms: 3.6 / 5 = 0.72
    assert cal["scored"] == "ms" and cal["share_ratio"] == 0.72
    assert ok["scored"] == "share" and ok["share_ratio"] == ok["ratio"]
    # a trap: 2% promised, 1% measured -> ok; the fix helped (8%) -> not ok
    small = rs.Prediction(19.6, "remedy remove_syncs", ("remove_syncs",))
    trap = dict(baseline_ms=12.0, captured_ms=20.0, trap=True)
    assert rs.score_row(small, fixed_ms=11.88, saving_pct=1.0, **trap)["ok"]
    helped = rs.score_row(small, fixed_ms=11.0, saving_pct=8.3, **trap)
    assert not helped["ok"] and not helped["no_gain_measured"]
    promised = rs.score_row(rs.Prediction(14.0, "remedy remove_syncs"), fixed_ms=11.9,
                            saving_pct=0.8, **trap)
    assert promised["predicted_saving_pct"] == 30.0 and not promised["ok"]
    # not offered at all on a trap: nothing promised
    assert rs.score_row(rs.Prediction(None, "not offered"), fixed_ms=12.1, saving_pct=-0.8,
                        **trap)["ok"]


def _variant(name: str, remedies: tuple[str, ...], fixed_ms: float, saving_pct: float,
             covers: tuple[str, ...] = (), trap: bool = False,
             status: str = "measured") -> dict[str, Any]:
    return {"name": name, "remedies": list(remedies), "covers": list(covers or remedies),
            "trap": trap, "status": status, "fixed_ms": fixed_ms, "saving_pct": saving_pct}


def conv_result(fields: dict[str, Any] | None) -> dict[str, Any]:
    vs = {
        "tf32": _variant("tf32", ("tf32",), 6.5, 45.8),
        "bf16_amp_channels_last": _variant("bf16_amp_channels_last",
                                           ("bf16_amp", "channels_last"), 3.0, 75.0,
                                           covers=("tf32", "bf16_amp", "channels_last",
                                                   "remove_syncs")),
        "remove_syncs": _variant("remove_syncs", ("remove_syncs",), 11.9, 0.8, trap=True),
        "not_built": _variant("not_built", ("cuda_graphs",), 0.0, 0.0, status="error"),
        "plain": _variant("plain", (), 9.0, 25.0),
    }
    prof = {"status": "ok", **fields} if fields is not None else {"status": "error"}
    return {"scenario": "conv_fp32", "table": "PyTorch", "timing": {"baseline_ms": 12.0},
            "variants": vs, "record": {"status": "ok", **rs.remedy_fields(stand_in_report())},
            "profiler": prof}


def test_score_variants_rows_and_plan_check() -> None:
    res = conv_result(None)
    out = rs.score_result(res)
    assert out["profiler"] is None
    rows = out["record"]
    assert rows is not None
    got = [(r["variant"], r["check"], r["source"], r["predicted_fixed_ms"], r["ratio"], r["ok"])
           for r in rows]
    assert got == [
        ("tf32", "remedy", "remedy tf32", 6.0, 0.923, True),
        ("bf16_amp_channels_last", "remedy", "option channels_last of bf16_amp", 3.0, 1.0,
         True),
        ("bf16_amp_channels_last", "plan", "plan", 2.25, 0.75, True),
        ("remove_syncs", "remedy", "remedy remove_syncs", 11.76, 0.988, True),
    ]
    t = rs.totals(rows)
    assert t == {"rows": 4, "predicted": 3, "ok": 3, "on_target": 2, "not_offered": 0,
                 "single_rows": 2, "single_ok": 2, "single_on_target": 2,
                 "plan_rows": 1, "plan_ok": 1, "plan_on_target": 0, "traps": 1, "traps_ok": 1,
                 "share_rows": 3, "share_ok": 3, "unstable": 0}


def test_a_calibrated_report_is_scored_as_it_is() -> None:
    # the same report with step_model.calibration reached: its predicted steps are absolute
    res = conv_result(None)
    res["record"]["step_model"] = {**(res["record"].get("step_model") or {}),
                                   "calibration": {"reached": True, "source": "given"}}
    rows = rs.score_result(res)["record"]
    assert rows is not None
    by = {(r["variant"], r["check"]): r for r in rows}
    tf32 = by[("tf32", "remedy")]
    assert tf32["predicted_fixed_ms"] == tf32["step_ms"] and tf32["ratio"] == tf32["direct_ratio"]
    # a trap still compares the report's promised saving with its own baseline
    trap = by[("remove_syncs", "remedy")]
    assert trap["ok"] and trap["predicted_saving_pct"] < rs.TRAP_MAX_PREDICTED_PCT


def test_a_report_whose_steps_are_the_programs_is_scored_in_its_own_ms() -> None:
    """Steps from a hook, torch.profiler or annotations: the report's predicted_step_ms against
    the measured fixed step as they are; steps recovered from periodicity: its share of its own
    step applied to the measured baseline (12 ms). Both ratios are kept on every row."""
    def rows(step_source: str | None, *, where: str = "top") -> dict[tuple[str, str], Any]:
        res = conv_result(None)
        if where == "top":
            res["record"]["step_source"] = step_source
        elif where == "summary":  # a results.json written before the field
            res["record"].pop("step_source", None)
            res["record"]["summary"] = {"step_source": step_source}
        got = rs.score_result(res)["record"]
        assert got is not None
        return {(r["variant"], r["check"]): r for r in got}

    def ratios(by: dict[tuple[str, str], Any]) -> list[tuple[Any, ...]]:
        return [(by[k]["scored"], by[k]["predicted_fixed_ms"], by[k]["ratio"], by[k]["ok"],
                 by[k]["share_ratio"], by[k]["direct_ratio"])
                for k in (("tf32", "remedy"), ("bf16_amp_channels_last", "remedy"),
                          ("bf16_amp_channels_last", "plan"))]

    # tf32: 8 ms of a 16 ms base, measured 6.5 ms: 8 / 6.5 = 1.231 in ms, 12 x 8/16 = 6 ->
    # 0.923 by share; bf16 + channels_last 5 of 20 against 3: 1.667 and 12 x 5/20 = 3 -> 1.0;
    # the plan 3.75 of 20: 1.25 and 2.25 / 3 = 0.75
    in_ms = [("ms", 8.0, 1.231, True, 0.923, 1.231), ("ms", 5.0, 1.667, False, 1.0, 1.667),
             ("ms", 3.75, 1.25, True, 0.75, 1.25)]
    by_share = [("share", 6.0, 0.923, True, 0.923, 1.231),
                ("share", 3.0, 1.0, True, 1.0, 1.667), ("share", 2.25, 0.75, True, 0.75, 1.25)]
    for source in ("hook", "profiler_step", "annotation", "hook+profiler_step"):
        assert ratios(rows(source)) == in_ms, source
    assert ratios(rows("hook", where="summary")) == in_ms
    # ... and a trace's, from its "traced" summary: the profiler path's rows in ms
    res = conv_result({**rs.remedy_fields(stand_in_report()),
                       "traced": {"step_source": "profiler_step"}})
    prof = rs.score_result(res)["profiler"]
    assert prof is not None
    tf32 = next(r for r in prof if (r["variant"], r["check"]) == ("tf32", "remedy"))
    assert (tf32["scored"], tf32["predicted_fixed_ms"], tf32["ratio"]) == ("ms", 8.0, 1.231)
    for source in ("periodicity", "hook+periodicity", "whole_trace", None):
        assert ratios(rows(source)) == by_share, source
    # a trap keeps the report's own share: 19.6 of its captured 20 ms, 2% promised
    trap = rows("hook")[("remove_syncs", "remedy")]
    assert trap["ok"] and trap["predicted_saving_pct"] == 2.0
    # the totals count the share apart: all three within 30% by it (0.923, 1.0, 0.75)
    t = rs.totals(list(rows("hook").values()))
    assert (t["ok"], t["share_ok"], t["share_rows"]) == (2, 3, 3)


def test_the_program_step_sources_are_the_reports() -> None:
    from stepscope.reporters.report import PROGRAM_STEPS

    assert rs.PROGRAM_STEP_SOURCES == PROGRAM_STEPS


def test_a_variant_timed_by_the_program_is_scored_against_the_programs_baseline() -> None:
    """--program-timing: program.py's loop timed the baseline and the default fix; the other
    variants were timed by the harness against its own baseline."""
    res = conv_result(None)
    res["timing"] = {"source": "program.py", "baseline_ms": 10.0, "fixed_ms": 5.0,
                     "saving_ms": 5.0, "saving_pct": 50.0}
    res["variants_timing"] = {"baseline_ms": 12.0}
    groups = rs.measured_groups(res)
    assert [(b, list(v or {})) for b, v in groups] == [
        (10.0, ["tf32"]), (12.0, ["bf16_amp_channels_last", "remove_syncs", "not_built",
                                  "plain"])]
    first = groups[0][1]
    assert first is not None
    assert (first["tf32"]["fixed_ms"], first["tf32"]["harness_fixed_ms"]) == (5.0, 6.5)
    rows = rs.score_result(res)["record"]
    assert rows is not None
    got = {(r["variant"], r["check"]): (r["measured_baseline_ms"], r["measured_fixed_ms"],
                                        r["predicted_fixed_ms"]) for r in rows}
    # tf32: the stand-in report predicts 6.0 of its 12.0 ms step: 10.0 x 0.5 against 5.0
    assert got[("tf32", "remedy")] == (10.0, 5.0, 5.0)
    assert got[("bf16_amp_channels_last", "remedy")] == (12.0, 3.0, 3.0)
    # without program timing every variant keeps the harness's measurement
    plain = conv_result(None)
    assert rs.measured_groups(plain) == [(12.0, plain["variants"])]
    md = "\n".join(remedy_report.remedies_md([{**res, "remedy_score": rs.score_result(res)}],
                                             "PyTorch"))
    assert "| conv_fp32 | tf32 | tf32 | 10.00 → 5.00 (50%) |" in md
    # every variant timed by the programs (timing.variants): all against the program's baseline
    res["timing"]["variants"] = {"tf32": {"fixed_ms": 5.0, "saving_ms": 5.0, "saving_pct": 50.0},
                                 "remove_syncs": {"fixed_ms": 9.0, "saving_ms": 1.0,
                                                  "saving_pct": 10.0}}
    groups = rs.measured_groups(res)
    assert [(b, list(v or {})) for b, v in groups] == [
        (10.0, ["tf32", "remove_syncs"]), (12.0, ["bf16_amp_channels_last", "not_built",
                                                  "plain"])]
    assert groups[0][1] is not None and groups[0][1]["remove_syncs"]["fixed_ms"] == 9.0
    # the plan table takes each variant as scored: the program's baseline and fixed step
    res["timing"]["variants"]["bf16_amp_channels_last"] = {"fixed_ms": 2.0, "saving_ms": 8.0,
                                                           "saving_pct": 80.0}
    scored = {**res, "remedy_score": rs.score_result(res)}
    plan = [ln for ln in remedy_report.plan_rows(scored) if "| bf16_amp_channels_last |" in ln]
    assert plan and all("| 10.00 → 2.00 (80%) |" in ln for ln in plan), plan


def test_a_variant_whose_program_runs_did_not_hold_still_is_not_scored() -> None:
    """A baseline whose processes ran at 28, 58 and 137 ms a step (the H100 call of 2026-11-27
    11:19) is no reference for a +-30% check: its rows are kept, marked, and counted apart."""
    assert rs.unstable_runs([28.2, 57.6, 137.2], [5.0, 6.6]) == "baseline runs 28.2-137.2 ms"
    assert rs.unstable_runs([20.0, 29.9], [4.0, 7.0]) == "variant runs 4.0-7.0 ms"
    assert rs.unstable_runs([20.0, 29.9], [4.0, 5.9]) is None  # within 1.5x each
    assert rs.unstable_runs([], [5.0]) is None  # one run: nothing to compare
    res = conv_result(None)
    res["timing"] = {"source": "program.py", "baseline_ms": 57.6,
                     "baseline_runs_ms": [28.2, 57.6, 137.2],
                     "variants": {"tf32": {"runs_ms": [5.0, 6.6, 5.2], "fixed_ms": 5.2,
                                           "saving_ms": 52.4, "saving_pct": 91.0}}}
    res["variants_timing"] = {"baseline_ms": 12.0}
    rows = rs.score_result(res)["record"]
    assert rows is not None
    tf32 = next(r for r in rows if r["variant"] == "tf32")
    assert tf32["unstable"] == "baseline runs 28.2-137.2 ms" and not tf32["ok"]
    others = [r for r in rows if r["variant"] != "tf32"]
    assert others and not any(r.get("unstable") for r in others)  # the harness's: scored
    t, t_all = rs.totals(others), rs.totals(rows)
    assert t_all["unstable"] == 1 and {k: v for k, v in t_all.items() if k != "unstable"} == \
        {k: v for k, v in t.items() if k != "unstable"}
    scored = {**res, "remedy_score": {"record": rows, "profiler": None}}
    md = "\n".join(remedy_report.remedies_md([scored], "PyTorch"))
    assert "not scored (baseline runs 28.2-137.2 ms)" in md
    assert "not scored, the measurement unstable: 1" in md
    only = rs.totals([tf32])
    assert only["rows"] == 0 and only["unstable"] == 1
    assert remedy_report.totals_text([{**scored, "remedy_score": {"record": [tf32]}}],
                                     "record") == "nothing scored (the measurement unstable: 1)"


def test_remedies_table() -> None:
    res = conv_result(rs.remedy_fields(stand_in_report(remedies=[], plan=None)))
    res["remedy_score"] = rs.score_result(res)
    md = "\n".join(remedy_report.remedies_md([res], "PyTorch"))
    assert "### Remedies (PyTorch)" in md
    assert ("| conv_fp32 | tf32 | tf32 | 12.00 → 6.50 (46%) | 6.00 (50%) | not offered | "
            "0.92 / – | ok / not offered |") in md
    assert ("| conv_fp32 | bf16_amp_channels_last | plan (bf16_amp+remove_syncs) | 12.00 → "
            "3.00 (75%) | 2.25 (81%) | – | 0.75 / – | ok (±30%) / – |") in md
    assert ("| conv_fp32 | remove_syncs | remove_syncs (trap) | 12.00 → 11.90 (1%) | "
            "11.76 (2%) | not offered | 0.99 / – | ok (trap) / ok (trap) |") in md
    assert "| conv_fp32 | not_built | cuda_graphs | not measured: error |" in md
    assert "plain" not in md  # no remedy id: not scored
    assert ("Remedies via record: within ±30% 3/3 (±20%: 2), not offered 0; one remedy 2/2, "
            "plans of several 1/1 (±20%: 0), traps ok 1/1; given the measured baseline 3/3. "
            "Via profiler trace: within ±30% 0/2 (±20%: 0), not offered 2, traps ok 1/1.") in md
    # the plan rows again, in a table of their own ("plan of A+B")
    assert "#### Plans of several remedies (PyTorch)" in md
    assert ("| conv_fp32 | bf16_amp_channels_last | bf16_amp+remove_syncs | 12.00 → 3.00 (75%) "
            "| – | 2.25 (81%) | – | 0.75 / – | ok (±30%) / – |") in md
    assert remedy_report.remedies_md([dict(res, variants={})], "PyTorch") == []


def two_fix_result(fields: dict[str, Any]) -> dict[str, Any]:
    """A scenario with two planted problems: each fix alone and both, measured (baseline
    20 ms)."""
    vs = {"both": _variant("both", ("cuda_graphs", "pinned_copies"), 4.0, 80.0),
          "cuda_graphs": _variant("cuda_graphs", ("cuda_graphs",), 9.0, 55.0),
          "pinned": _variant("pinned", ("pinned_copies",), 12.0, 40.0)}
    return {"scenario": "graphs_pageable", "table": "PyTorch", "timing": {"baseline_ms": 20.0},
            "variants": vs, "record": {"status": "ok", **fields},
            "profiler": {"status": "error"}}


def test_a_two_fix_variant_is_scored_against_the_plan_subset_of_its_remedies() -> None:
    # the report: captured 20 ms; graphs alone -> 10, pinned alone -> 12, the plan (graphs,
    # pinned, remove_syncs) -> 3, its subset of graphs + pinned -> 5 (not 20 - 10 - 8 = 2)
    rep = stand_in_report(
        remedies=[{"id": "cuda_graphs", "baseline_ms": 20.0, "predicted_step_ms": 10.0},
                  {"id": "pinned_copies", "baseline_ms": 20.0, "predicted_step_ms": 12.0},
                  {"id": "remove_syncs", "baseline_ms": 20.0, "predicted_step_ms": 19.0}],
        plan={"baseline_ms": 20.0, "predicted_step_ms": 3.0,
              "remedy_ids": ["cuda_graphs", "pinned_copies", "remove_syncs"],
              "subsets": [{"remedy_ids": ["cuda_graphs", "remove_syncs"],
                           "predicted_step_ms": 9.0},
                          {"remedy_ids": ["cuda_graphs", "pinned_copies"],
                           "predicted_step_ms": 5.0}]})
    res = two_fix_result(rs.remedy_fields(rep))
    rows = rs.score_result(res)["record"]
    assert rows is not None
    got = [(r["variant"], r["check"], r["source"], r["predicted_fixed_ms"], r["ratio"])
           for r in rows]
    assert got == [
        # measured baseline 20 x 5 / 20 = 5 against 4 measured; the whole plan (3) is not it
        ("both", "remedy", "plan restricted to cuda_graphs+pinned_copies", 5.0, 1.25),
        ("cuda_graphs", "remedy", "remedy cuda_graphs", 10.0, 1.111),
        ("pinned", "remedy", "remedy pinned_copies", 12.0, 1.0),
    ]
    t = rs.totals(rows)
    assert (t["single_rows"], t["single_ok"], t["plan_rows"], t["plan_ok"]) == (2, 2, 1, 1)
    res["remedy_score"] = {"record": rows, "profiler": None}
    md = "\n".join(remedy_report.remedies_md([res], "PyTorch"))
    assert ("| graphs_pageable | both | cuda_graphs+pinned_copies | 20.00 → 4.00 (80%) | "
            "cuda_graphs 55%, pinned_copies (pinned) 40%; sum 95% | 5.00 (75%) | no report | "
            "1.25 / – | ok (±30%) / – |") in md
    # without the subset, the plan is not the variant's (remove_syncs is not covered)
    rep["plan"] = dict(rep["plan"], subsets=[])
    rows = rs.score_result(two_fix_result(rs.remedy_fields(rep)))["record"]
    assert rows is not None and rows[0]["source"] == "not offered"


def test_the_two_fix_scenarios_declare_both_remedies_and_each_alone() -> None:
    pytest.importorskip("torch")
    import importlib

    for name, pair in (("graphs_pageable", ("cuda_graphs", "pinned_copies")),
                       ("loader_tf32", ("dataloader_workers", "tf32")),
                       ("sync_tf32", ("remove_syncs", "tf32"))):
        vs = variants.variants_of(importlib.import_module(name))
        assert vs[0].remedies == pair and vs[0].covers == pair  # the default fix: both
        assert sorted(v.remedies for v in vs[1:]) == sorted((r,) for r in pair)
        assert name in timing.SCENARIOS


def test_the_two_fix_programs_run_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    import program

    for args in (["graphs_pageable"], ["graphs_pageable", "--variant", "pinned"],
                 ["sync_tf32", "--fixed"], ["sync_tf32", "--variant", "tf32"],
                 ["loader_tf32", "--variant", "tf32"]):
        assert program.main([*args, "--device", "cpu", "--steps", "2"]) == 0, args
    assert program.main(["graphs_pageable", "--fixed", "--device", "cpu"]) == \
        program.EXIT_SKIPPED  # CUDA graphs need CUDA
    out = capsys.readouterr().out
    assert "program.py: sync_tf32 (fixed, cpu): 2 steps" in out


def test_build_variants_goes_on_past_a_variant_that_fails_and_measures_the_rest() -> None:
    import argparse

    import run

    def build(fixed: bool | str, device: str) -> timing.Step:
        if fixed == "bad":
            raise RuntimeError("boom")
        if fixed == "skip":
            raise timing.SkipScenario("needs X")
        return timing.Step(lambda: time.sleep(0.001 if fixed else 0.002), info={"v": fixed})

    mod = _mod(VARIANTS={"bad": ("bf16_amp",), "ok": ("tf32",), "skip": ("channels_last",)},
               build=build)
    res: dict[str, Any] = {}
    base, fixes = run.build_variants(mod, "cpu", res)
    assert list(fixes) == ["ok"] and base.info == {"v": False}
    assert res["variants"]["bad"]["status"] == "error" and "boom" in res["variants"]["bad"][
        "error"]
    assert res["variants"]["skip"]["status"] == "skipped: needs X"
    assert res["info"]["fixed"] == {"v": "ok"}
    runners = {"baseline": timing.PlainRunner(base), "ok": timing.PlainRunner(fixes["ok"])}
    args = argparse.Namespace(rounds=2, steps=2, warmup=1)
    run.measure_variants(runners, args, res)
    assert res["timing"]["fixed_variant"] == "ok" and res["timing"]["order"] == ["BF", "FB"]
    assert res["variants"]["ok"]["status"] == "measured"
    assert res["variants"]["ok"]["saving_ms"] == pytest.approx(
        res["timing"]["saving_ms"], abs=1e-3)
    only_skips = _mod(VARIANTS={"skip": ("tf32",)}, build=build)
    with pytest.raises(timing.SkipScenario, match="needs X"):
        run.build_variants(only_skips, "cpu", {})


def test_a_report_paced_by_the_gpu_is_scored_by_its_share() -> None:
    """A recorded run calibrated by the GPU's utilisation after its window (no step hook: its
    steps may be a part of the program's) keeps the relative score, unlike one calibrated to
    a step."""
    from stepscope.advisor.remedies import PACED

    assert rs.PACED == PACED  # the report's source string, kept in this torch-free module
    res = conv_result(None)
    res["record"]["step_model"] = {**(res["record"].get("step_model") or {}),
                                   "calibration": {"reached": True, "source": PACED}}
    res["timing"] = {**res["timing"], "baseline_ms": 10.0}  # measured apart from the report

    def tf32_row() -> dict[str, Any]:
        rows = rs.score_result(res)["record"]
        assert rows is not None
        return next(r for r in rows if (r["variant"], r["check"]) == ("tf32", "remedy"))

    # paced: the report's share of its own step, applied to the measured 10.0 ms
    row = tf32_row()
    assert row["predicted_fixed_ms"] == pytest.approx(10.0 * row["step_ms"] / row["base_ms"])
    assert row["predicted_fixed_ms"] != row["step_ms"]
    res["record"]["step_model"]["calibration"]["source"] = "given"
    row = tf32_row()
    assert row["predicted_fixed_ms"] == row["step_ms"]  # a step given: its ms as they are
