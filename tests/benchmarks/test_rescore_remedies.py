"""benchmarks/scenarios: the suite's bundle in parts (bundle.py) and re-scoring a finished
suite with the current code (rescore_remedies.py) from a bundled torch.profiler trace and a
bundled recorded run (tests/data fixtures standing in for a GPU call's)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
DATA = Path(__file__).resolve().parents[1] / "data"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import bundle
import rescore_remedies


def _blob(path: Path, kib: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * (kib * 1024))


def test_pack_bundle_splits_into_parts_and_unpacks(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    names = ["a", "b", "c"]
    for n in names:
        _blob(out / "scenarios" / f"{n}.json", 1)
        _blob(out / "torch" / "traces" / f"{n}.pt.trace.json.gz", 300)
    _blob(out / "rec" / "a" / "manifest.json", 200)
    _blob(out / "rec" / "b" / "events" / "rank-0.parquet", 700)  # over the limit alone
    res = [{"scenario": n} for n in names]
    got = bundle.pack_bundle(out, res, limit_mb=0.5, parts=3)
    # part 1: the small files + trace a; part 2: trace b; part 3: trace c + run a; run b: left
    assert [Path(p).name for p in got["parts"]] == ["bundle.tar.gz", "bundle-2.tar.gz",
                                                    "bundle-3.tar.gz"]
    assert got["included"] == ["trace a", "trace b", "trace c", "run a"]
    assert got["left_out"] == ["run b"]
    one = bundle.pack_bundle(out, res, limit_mb=0.5)  # one part: what does not fit is left
    assert [Path(p).name for p in one["parts"]] == ["bundle.tar.gz"]
    assert not (out / "bundle-2.tar.gz").exists()  # the earlier pack's parts are gone
    assert one["included"] == ["trace a", "run a"]
    assert one["left_out"] == ["trace b", "trace c", "run b"]
    got = bundle.pack_bundle(out, res, limit_mb=0.5, parts=3)
    dest = tmp_path / "back"
    assert len(bundle.unpack([out], dest)) == 3
    assert (dest / "rec" / "a" / "manifest.json").stat().st_size == 200 * 1024
    assert (dest / "torch" / "traces" / "c.pt.trace.json.gz").is_file()
    assert not (dest / "rec" / "b").exists()


def _bogus(id_: str) -> dict[str, Any]:
    return {"id": id_, "severity": "critical", "est_saving_ms": 9.0, "est_saving_pct": 90.0,
            "confidence": "high", "title": id_}


def _scenario(name: str, expected: str, variants: dict[str, Any]) -> dict[str, Any]:
    timing = {"baseline_ms": 5.5, "fixed_ms": 4.5, "saving_ms": 1.0, "saving_pct": 18.2}
    return {"scenario": name, "expected": expected, "table": "PyTorch", "framework": "torch",
            "status": "ok", "timing": timing, "variants": variants,
            "record": {"status": "ok", "findings": [_bogus("bogus_record")],
                       "program_line": "program.py: x"},
            "profiler": {"status": "ok", "findings": [_bogus("bogus_profiler")]}}


def test_rescore_re_advises_bundled_trace_and_run(tmp_path: Path) -> None:
    call = tmp_path / "rv1"
    work = tmp_path / "work"
    pinned = {"fixed": {"name": "fixed", "remedies": ["pinned_copies"], "trap": False,
                        "covers": ["pinned_copies"], "status": "measured", "fixed_ms": 4.5,
                        "saving_pct": 18.2}}
    results = [_scenario("pageable_copies", "pageable_memcpy", pinned),
               _scenario("healthy", "", {"fixed": {"name": "fixed", "remedies": [],
                                                   "status": "measured", "fixed_ms": 5.5,
                                                   "saving_pct": 0.0}})]
    # the GPU call's folder: the pageable trace fixture as pageable_copies' torch.profiler
    # trace, the recorded H100 run as healthy's recorded run
    trace = work / "torch" / "traces" / "pageable_copies.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    shutil.copy2(DATA / "h200_pageable_batch.pt.trace.json.gz", trace)
    shutil.copytree(DATA / "recorded" / "h100_healthy", work / "rec" / "healthy")
    for r in results:
        (work / "scenarios").mkdir(exist_ok=True)
        (work / "scenarios" / f"{r['scenario']}.json").write_text(json.dumps(r))
    call.mkdir()
    packed = bundle.pack_bundle(work, results, limit_mb=14.0, parts=2)
    assert packed["left_out"] == []
    for p in packed["parts"]:
        shutil.copy2(p, call / Path(p).name)
    (call / "results.json").write_text(json.dumps(
        {"meta": {"date": "2026-11-26 18:00:00 UTC", "command": "record_suite.py"},
         "scenarios": results}))

    new = tmp_path / "new"
    assert rescore_remedies.main(["--suite", str(call), "--out", str(new)]) == 0
    data = json.loads((new / "results.json").read_text())
    by = {r["scenario"]: r for r in data["scenarios"]}
    assert [r["scenario"] for r in data["scenarios"]] == ["healthy", "pageable_copies"]
    page = by["pageable_copies"]
    assert page["rescored"] == "profiler re-advised; record kept (no run in the bundle)"
    prof_ids = [f["id"] for f in page["profiler"]["findings"]]
    assert "bogus_profiler" not in prof_ids and "pageable_memcpy" in prof_ids
    assert page["profiler"]["captured_step_ms"] > 0
    assert [f["id"] for f in page["record"]["findings"]] == ["bogus_record"]  # kept
    assert page["score"]["profiler"]["expected_rank"] is not None
    rows = page["remedy_score"]["profiler"]
    assert [(r["variant"], r["measured_fixed_ms"]) for r in rows] == [("fixed", 4.5)]
    healthy = by["healthy"]
    assert healthy["rescored"] == "profiler kept (no trace in the bundle); record re-advised"
    assert "bogus_record" not in [f["id"] for f in healthy["record"]["findings"]]
    assert healthy["record"]["summary"]["steps"] == 50
    assert healthy["record"]["program_line"] == "program.py: x"  # the call's facts kept
    assert healthy["remedy_score"]["record"] == []  # its fix names no remedy
    md = (new / "accuracy.md").read_text()
    assert "Re-scored: advisor and remedies re-run without a GPU" in md
    assert "### Remedies (PyTorch)" in md and "| pageable_copies | fixed | pinned_copies |" in md

    # --calibrate: the remedies calibrated to each scenario's measured baseline (5.5 ms)
    cal = tmp_path / "cal"
    assert rescore_remedies.main(["--suite", str(call), "--out", str(cal), "--calibrate"]) == 0
    data = json.loads((cal / "results.json").read_text())
    by = {r["scenario"]: r for r in data["scenarios"]}
    page = by["pageable_copies"]
    assert page["rescored"].startswith("profiler re-advised, calibrated to 5.50 ms (")
    assert page["profiler"]["step_model"]["calibration"]["reached"]
    assert all(r["baseline_ms"] == pytest.approx(5.5) for r in page["profiler"]["remedies"])
    row = page["remedy_score"]["profiler"][0]
    assert row["base_ms"] == pytest.approx(5.5) and row["ratio"] == row["direct_ratio"]
    # the healthy H100 run (50 hooked steps, GPU-bound): its GPU side scaled to 5.5 ms
    assert by["healthy"]["rescored"].endswith("record re-advised, calibrated to 5.50 ms (gpu x0.5663)")
    assert data["meta"]["command"].endswith(" --calibrate")


def test_rescore_says_when_a_folder_has_no_results(tmp_path: Path, capsys: Any) -> None:
    assert rescore_remedies.main(["--suite", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no results.json in" in capsys.readouterr().err


def test_rescore_writes_only_into_a_new_or_empty_folder(tmp_path: Path, capsys: Any) -> None:
    call = tmp_path / "call"
    call.mkdir()
    (call / "results.json").write_text('{"meta": {}, "scenarios": []}')
    used = tmp_path / "used"
    used.mkdir()
    (used / "accuracy.md").write_text("the user's")
    assert rescore_remedies.main(["--suite", str(call), "--out", str(used)]) == 2
    assert "give a new or empty folder" in capsys.readouterr().err
    assert (used / "accuracy.md").read_text() == "the user's"
    assert sorted(p.name for p in used.iterdir()) == ["accuracy.md"]


def test_rescore_reads_an_earlier_suites_bundle_alone(tmp_path: Path) -> None:
    """A bundle tarball of a run before variants (no results.json): its scenario results, the
    one measured fix as the default variant of the scenario as declared now."""
    pytest.importorskip("torch")  # importing the scenario module to read its variants
    work = tmp_path / "work"
    trace = work / "torch" / "traces" / "fp32_no_tf32.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    shutil.copy2(DATA / "h200_pageable_batch.pt.trace.json.gz", trace)  # any torch trace
    res = _scenario("fp32_no_tf32", "no_tensor_cores", {})
    del res["variants"]
    (work / "scenarios").mkdir()
    (work / "scenarios" / "fp32_no_tf32.json").write_text(json.dumps(res))
    packed = bundle.pack_bundle(work, [res], limit_mb=14.0)
    old = tmp_path / "rsA.tar.gz"
    shutil.copy2(packed["path"], old)
    new = tmp_path / "new"
    assert rescore_remedies.main(["--suite", str(old), "--out", str(new)]) == 0
    (got,) = json.loads((new / "results.json").read_text())["scenarios"]
    v = got["variants"]
    assert list(v) == ["tf32"] and v["tf32"]["remedies"] == ["tf32"]
    assert (v["tf32"]["fixed_ms"], v["tf32"]["saving_pct"]) == (4.5, 18.2)  # its timing
    assert got["rescored"] == "profiler re-advised; record kept (no run in the bundle)"
    assert [r["variant"] for r in got["remedy_score"]["profiler"]] == ["tf32"]
    md = (new / "accuracy.md").read_text()
    assert "| fp32_no_tf32 | tf32 | tf32 | 5.50 → 4.50 (18%) | run not bundled |" in md


def test_rescore_names_measured_variants_as_the_scenario_declares_them_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    mod = types.ModuleType("fake_scenario")
    mod.VARIANTS = {"fixed": ("remove_round_trip",), "trap": ("remove_round_trip",)}  # type: ignore[attr-defined]
    mod.TRAPS = ("trap",)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_scenario", mod)
    res = {"scenario": "fake_scenario", "variants": {
        "fixed": {"name": "fixed", "remedies": ["remove_syncs"], "trap": False,
                  "covers": ["remove_syncs"], "status": "measured", "fixed_ms": 4.5},
        "trap": {"name": "trap", "remedies": ["remove_syncs"], "trap": False,
                 "status": "measured", "fixed_ms": 6.0},
        "gone": {"name": "gone", "remedies": ["tf32"], "status": "measured"}}}
    rescore_remedies.redeclare(res)
    v = res["variants"]
    assert v["fixed"]["remedies"] == ["remove_round_trip"] and v["fixed"]["fixed_ms"] == 4.5
    assert v["fixed"]["covers"] == ["remove_round_trip"]
    assert v["trap"]["trap"] is True and v["trap"]["remedies"] == ["remove_round_trip"]
    assert v["gone"]["remedies"] == ["tf32"]  # no longer declared: kept as measured
    res_unknown = {"scenario": "no_such_scenario_module", "variants": {"x": {"remedies": ["a"]}}}
    rescore_remedies.redeclare(res_unknown)
    assert res_unknown["variants"]["x"]["remedies"] == ["a"]


def test_a_variant_whose_program_changed_under_its_name_is_measured_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # variants.RENAMED: cpu_ops_midstep's old "pinned" sorted in place; an old result's
    # "pinned" is now "pinned_inplace" (no remedy: not scored), a new one keeps both
    import types

    import variants

    mod = types.ModuleType("fake_renamed")
    mod.VARIANTS = {"gpu": ("ops_to_gpu",), "pinned": ("pinned_copies",),  # type: ignore[attr-defined]
                    "pinned_inplace": ()}
    monkeypatch.setitem(sys.modules, "fake_renamed", mod)
    monkeypatch.setitem(variants.RENAMED, ("fake_renamed", "pinned"), "pinned_inplace")

    def measured(*names: str) -> dict[str, Any]:
        return {"scenario": "fake_renamed", "variants": {
            n: {"name": n, "remedies": ["pinned_copies"], "status": "measured",
                "fixed_ms": 9.0} for n in names}}

    old = measured("gpu", "pinned")
    rescore_remedies.redeclare(old)
    assert set(old["variants"]) == {"gpu", "pinned_inplace"}
    moved = old["variants"]["pinned_inplace"]
    assert moved["remedies"] == [] and moved["fixed_ms"] == 9.0
    assert moved["name"] == "pinned_inplace" and moved["measured_as"] == "pinned"
    new = measured("gpu", "pinned", "pinned_inplace")
    rescore_remedies.redeclare(new)
    assert new["variants"]["pinned"]["remedies"] == ["pinned_copies"]
    assert new["variants"]["pinned_inplace"]["remedies"] == []
    assert "measured_as" not in new["variants"]["pinned"]


def test_rescore_a_jax_scenario_from_its_xspace_and_recorded_run(tmp_path: Path) -> None:
    """The JAX leg: the bundled XSpace re-advised as the profiler trace, the recorded run
    re-advised, and the fix (timed by program.py's own loop, ``--program-timing``) scored
    against the program's baseline and fixed step on both paths (the H100 runs of the
    jax_host_callback plant, tests/data/PROVENANCE.md)."""
    call, work = tmp_path / "h1", tmp_path / "work"
    name = "jax_host_callback"
    xplane = work / "xplane" / f"{name}.xplane.pb.gz"
    xplane.parent.mkdir(parents=True)
    shutil.copy2(DATA / "xspace" / "jax_host_callback_steady_h100.xplane.pb.gz", xplane)
    shutil.copytree(DATA / "recorded" / "h100_jax_host_callback", work / "rec" / name)
    fixed = {"name": "fixed", "remedies": ["remove_callback"], "trap": False,
             "covers": ["remove_callback"], "status": "measured", "fixed_ms": 2.2608,
             "saving_pct": 83.51}
    res = {"scenario": name, "expected": "host_bound", "table": "JAX", "framework": "jax",
           "status": "ok", "variants": {"fixed": fixed},
           "variants_timing": {"baseline_ms": 13.7129},
           "timing_harness": {"baseline_ms": 13.7129, "fixed_ms": 2.2608},
           "timing": {"source": "program.py", "baseline_ms": 13.609, "fixed_ms": 2.585,
                      "saving_ms": 11.024, "saving_pct": 81.01},
           "record": {"status": "ok", "findings": [_bogus("bogus_record")]},
           "profiler": {"status": "ok", "findings": [_bogus("bogus_profiler")]}}
    (work / "scenarios").mkdir()
    (work / "scenarios" / f"{name}.json").write_text(json.dumps(res))
    packed = bundle.pack_bundle(work, [res], limit_mb=14.0)
    assert packed["left_out"] == []
    call.mkdir()
    shutil.copy2(packed["path"], call / "bundle.tar.gz")
    (call / "results.json").write_text(json.dumps(
        {"meta": {"date": "2026-11-26 20:33:18 UTC", "command": "record_suite.py"},
         "scenarios": [res]}))
    new = tmp_path / "new"
    assert rescore_remedies.main(["--suite", str(call), "--out", str(new)]) == 0
    (got,) = json.loads((new / "results.json").read_text())["scenarios"]
    assert got["rescored"] == "profiler re-advised; record re-advised"
    for path in ("record", "profiler"):
        assert got[path]["findings"][0]["id"] == "host_bound"
        (row,) = got["remedy_score"][path]
        assert row["source"] == "remedy remove_callback"
        assert (row["measured_baseline_ms"], row["measured_fixed_ms"]) == (13.609, 2.585)
        assert row["ok"], row
    md = (new / "accuracy.md").read_text()
    assert "| jax_host_callback | fixed | remove_callback | 13.61 → 2.58 (81%) |" in md
    # --calibrate: the XSpace's steps are the program's (calibrated to timing's 13.609 ms);
    # the recorded run's were recovered from the kernel stream's periodicity: reported
    # uncalibrated, and said
    cal = tmp_path / "cal"
    assert rescore_remedies.main(["--suite", str(call), "--out", str(cal), "--calibrate"]) == 0
    (got,) = json.loads((cal / "results.json").read_text())["scenarios"]
    prof, rec = got["rescored"].split("; ")
    assert prof.startswith("profiler re-advised, calibrated to 13.61 ms (host x"), prof
    assert rec == "record re-advised, not calibrated (its steps are not the program's)"
    assert got["record"]["status"] == "ok" and got["record"]["step_model"]["calibration"] is None
    assert got["profiler"]["step_model"]["calibration"]["untraced_step_ms"] == 13.609
