"""benchmarks/scenarios/record_suite.py: scoring, tables and merging (pure), program.py, the
torch-free timing child of the JAX/CuPy scenarios, and one real ``stepscope record`` of a
scenario program on the CPU, advised as the suite does it."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import record_report as rr
import timing

TIMING = {"baseline_ms": 10.0, "fixed_ms": 4.0, "saving_ms": 6.0, "saving_pct": 60.0}


def f(id_: str, severity: str, pct: float, ms: float = 0.0) -> dict[str, Any]:
    return {"id": id_, "severity": severity, "est_saving_pct": pct, "est_saving_ms": ms,
            "confidence": "high", "title": id_}


# -- scoring --------------------------------------------------------------------------------


def test_score_ignores_info_findings_ranked_above_the_planted_rule() -> None:
    sc = timing.score_first_serious(
        "small_grid", TIMING, [f("sync_calls", "info", 90.0), f("small_grid", "critical", 51.0)])
    assert sc["top"] == "small_grid" and sc["ranked_first"]
    assert sc["expected_rank"] == 2
    assert sc["ratio_pct"] == 0.85  # 51 / 60
    assert sc["within_tolerance"] and sc["passed"]


def test_score_fails_when_another_warning_comes_first_or_estimate_is_off() -> None:
    other_first = timing.score_first_serious(
        "host_bound", TIMING, [f("unstable_steps", "warning", 20.0), f("host_bound", "warning",
                                                                       60.0)])
    assert other_first["top"] == "unstable_steps" and not other_first["ranked_first"]
    assert other_first["within_tolerance"] and not other_first["passed"]
    off = timing.score_first_serious("host_bound", TIMING, [f("host_bound", "critical", 40.0)])
    assert off["ranked_first"] and off["ratio_pct"] == 0.667 and not off["within_tolerance"]
    assert not off["passed"]


def test_score_healthy_and_missing_report() -> None:
    assert timing.score_first_serious("", TIMING, [f("sync_calls", "info", 1.0)])["passed"]
    assert not timing.score_first_serious("", TIMING, [f("step_gaps", "warning", 5.0)])["passed"]
    none = timing.score_first_serious("launch_bound", TIMING, None)
    assert not none["has_report"] and not none["passed"] and none["est_saving_pct"] is None


# -- scenario declarations ----------------------------------------------------------------


def test_scenario_meta_defaults_and_declarations() -> None:
    pytest.importorskip("torch")  # the scenarios are PyTorch programs
    import importlib

    healthy = timing.ScenarioMeta.of(importlib.import_module("healthy"))
    assert (healthy.framework, healthy.step_hook, healthy.table) == ("torch", True, "PyTorch")
    assert healthy.program_steps == timing.HOOK_PROGRAM_STEPS and healthy.program_seconds is None
    for name, fw, table in (("launch_bound", "torch", "PyTorch"),
                            ("torch_manual_sgd", "torch", "PyTorch"),
                            ("triton_small_grid", "torch", "CuPy/Triton"),
                            ("jax_eager", "jax", "JAX"), ("jax_jit", "jax", "JAX"),
                            ("cupy_pageable", "cupy", "CuPy/Triton"),
                            ("torch_inference", "torch", "PyTorch")):
        m = timing.ScenarioMeta.of(importlib.import_module(name))
        assert (m.framework, m.step_hook, m.table) == (fw, False, table), name
        assert m.program_seconds == timing.TIMED_PROGRAM_SECONDS and m.program_steps is None
        assert m.expected
    assert timing.ScenarioMeta.of(importlib.import_module("small_grid")).table == "CuPy/Triton"


# -- the table and merging ----------------------------------------------------------------


def result(name: str, expected: str, table: str, rec: list[dict[str, Any]] | None,
           prof: list[dict[str, Any]] | None, framework: str = "torch") -> dict[str, Any]:
    profiler = ({"status": "n/a", "why": f"{framework} program"} if framework != "torch"
                else {"status": "ok", "findings": prof or []})
    return {
        "scenario": name, "expected": expected, "table": table, "framework": framework,
        "status": "ok", "timing": TIMING,
        "record": {"status": "ok", "findings": rec or [],
                   "summary": {"steps": 120, "step_source": "time window"}},
        "profiler": profiler,
        "score": {"record": timing.score_first_serious(expected, TIMING, rec),
                  "profiler": None if framework != "torch" else
                  timing.score_first_serious(expected, TIMING, prof)},
    }


def test_accuracy_md_one_table_per_framework_with_both_paths() -> None:
    results = [
        result("healthy", "", "PyTorch", [f("sync_calls", "info", 1.0)], []),
        result("fp32_no_tf32", "no_tensor_cores", "PyTorch",
               [f("no_tensor_cores", "critical", 57.0)], [f("no_tensor_cores", "critical", 63.0)]),
        result("jax_jit", "no_tensor_cores", "JAX", [f("host_bound", "warning", 10.0)], None,
               framework="jax"),
    ]
    md = rr.accuracy_md(results, {"device_name": "GPU|X", "driver": "1.0", "versions": {}})
    assert md.index("## PyTorch") < md.index("## JAX")
    assert "## CuPy/Triton" not in md
    assert ("| healthy | (healthy) | none (1 info) | none | – | – | pass / pass | "
            "6.00 / 60.0% (10.00 → 4.00) | 120 (time window) |") in md
    assert ("| fp32_no_tf32 | no_tensor_cores | no_tensor_cores (critical) | no_tensor_cores "
            "(critical) | 57.0% / 60.0% = 0.95 ok | 63.0% / 60.0% = 1.05 ok | yes / yes |") in md
    assert ("| jax_jit | no_tensor_cores | host_bound (warning) | n/a (jax program) | "
            "not found | – | no (absent) / – |") in md
    assert ("Record: ranked first 1/1, estimate within ±30% 1/1, healthy without "
            "warning/critical 1/1") in md
    assert "**All: record ranked first 1/2" in md


def test_merge_later_folder_wins_and_registry_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d, names, dev in ((a, ["jax_jit", "healthy"], "H100"), (b, ["healthy"], "H200")):
        d.mkdir()
        res = [dict(result(n, "", "PyTorch", [], []), note=d.name) for n in names]
        (d / "results.json").write_text(json.dumps(
            {"meta": {"device_name": dev, "command": f"run {d.name}"}, "scenarios": res}))
    meta, results = rr.merge([a, b])
    assert [(r["scenario"], r["note"]) for r in results] == [("healthy", "b"), ("jax_jit", "a")]
    assert [m["command"] for m in meta["merged_from"]] == ["run a", "run b"]
    assert "different devices" in meta["warning"]


def test_detail_compares_the_program_loop_with_the_timed_baseline() -> None:
    line = "program.py: jax_host_callback (baseline, cuda): 1699 steps in 14.01 s, 8.245 ms/step"
    assert rr.program_ms(line) == 8.245 and rr.program_ms("nothing") is None
    r = {"scenario": "x", "timing": {"baseline_ms": 14.24},
         "record": {"findings": [], "program_line": line}}
    assert "program loop / timed baseline 8.24 / 14.24 ms = 0.58" in rr.detail(r)


def test_program_timing_defaults_to_the_scenarios_the_harness_cannot_time() -> None:
    import record_suite

    assert record_suite.parse_args(["--out", "x"]).program_timing == \
        ["dataloader_bound", "loader_tf32"] == list(timing.TIMED_BY_PROGRAMS)
    assert record_suite.parse_args(["--out", "x", "--program-timing", "none"]).program_timing == []
    assert record_suite.parse_args(["--out", "x", "--program-timing", "healthy"]
                                   ).program_timing == ["healthy"]


def test_program_timing_alternates_processes_and_takes_medians(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import record_suite

    calls: list[str] = []
    ms = {"baseline": iter([10.0, 12.0, 11.0]), "fixed": iter([4.0, 5.0, 3.0])}

    def fake_run(cmd: list[str], timeout: float, log_path: Path,
                 env: dict[str, str] | None = None) -> tuple[int, float]:
        variant = "fixed" if "--variant" in cmd else "baseline"
        assert cmd[cmd.index("--warmup-steps") + 1] == "0"
        calls.append(variant[0].upper())
        log_path.write_text(f"program.py: x ({variant}, cuda): 9 steps in 5.0 s, "
                            f"{next(ms[variant]):.3f} ms/step\n")
        return 0, 5.0

    monkeypatch.setattr(record_suite, "run_limited", fake_run)
    args = argparse.Namespace(program_rounds=3, program_seconds_each=5.0, device="cuda",
                              program_warmup_steps=0)
    t = record_suite.time_programs("jax_host_callback", args, tmp_path)
    assert "".join(calls) == "BFFBBF"
    assert (t["baseline_ms"], t["fixed_ms"], t["saving_ms"]) == (11.0, 4.0, 7.0)
    assert t["saving_pct"] == pytest.approx(63.64, abs=0.01)
    assert t["variants"] == {"fixed": {"runs_ms": [4.0, 5.0, 3.0], "fixed_ms": 4.0,
                                       "saving_ms": 7.0, "saving_pct": t["saving_pct"]}}

    def failing(cmd: list[str], timeout: float, log_path: Path,
                env: dict[str, str] | None = None) -> tuple[int, float]:
        log_path.write_text("boom\n")
        return 3, 1.0

    monkeypatch.setattr(record_suite, "run_limited", failing)
    assert "exited with 3: boom" in record_suite.time_programs("jax_host_callback", args,
                                                               tmp_path)["error"]


def test_program_timing_times_every_variant_steady(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # loader_tf32: the baseline and its three variants, each its own process, the order
    # reversed every other round; the steady line is the figure where program.py printed one
    pytest.importorskip("torch")
    import record_suite

    calls: list[str] = []
    ms = {"base": 30.0, "both": 3.5, "loader": 11.0, "tf32": 17.0}

    def fake_run(cmd: list[str], timeout: float, log_path: Path,
                 env: dict[str, str] | None = None) -> tuple[int, float]:
        name = cmd[cmd.index("--variant") + 1] if "--variant" in cmd else "base"
        assert cmd[cmd.index("--warmup-steps") + 1] == "20"
        calls.append(name)
        log_path.write_text(f"program.py: steady: {ms[name] + len(calls) / 100:.3f} ms/step over "
                            f"the last 80 steps\nprogram.py: x: 100 steps in 5.0 s, 99.000 "
                            "ms/step\n")
        return 0, 5.0

    monkeypatch.setattr(record_suite, "run_limited", fake_run)
    args = argparse.Namespace(program_rounds=2, program_seconds_each=3.0, device="cuda",
                              program_warmup_steps=20)
    t = record_suite.time_programs("loader_tf32", args, tmp_path)
    assert calls == ["base", "both", "loader", "tf32", "tf32", "loader", "both", "base"]
    assert t["baseline_runs_ms"] == [30.01, 30.08] and t["baseline_ms"] == 30.045
    assert t["variants"]["tf32"]["runs_ms"] == [17.04, 17.05]
    assert (t["fixed_ms"], t["variants"]["both"]["fixed_ms"]) == (3.545, 3.545)
    assert sorted(p.name for p in (tmp_path / "programs").iterdir())[:2] == [
        "loader_tf32.baseline.0.log", "loader_tf32.baseline.1.log"]


def test_jax_xplane_kept_gzipped_copied_and_bundled(tmp_path: Path) -> None:
    import gzip

    import record_suite

    out, copy_to = tmp_path / "out", tmp_path / "OUT"
    src = out / "torch" / "traces" / "jax_jit.jax" / "plugins" / "profile" / "r1" / "h.xplane.pb"
    src.parent.mkdir(parents=True)
    payload = bytes(range(256)) * 64
    src.write_bytes(payload)
    kept = record_suite.keep_xplane("jax_jit", {"path": str(src)}, out, copy_to)
    assert kept is not None and kept["bytes"] == len(payload)
    assert gzip.decompress((copy_to / "jax_jit.xplane.pb.gz").read_bytes()) == payload
    assert record_suite.keep_xplane("jax_eager", None, out, copy_to) is None
    too_big = record_suite.keep_xplane("jax_jit", {"path": str(src)}, out, tmp_path / "small",
                                       limit_mb=1e-6)
    assert too_big is not None and str(too_big["copied"]).startswith("no:")
    assert not (tmp_path / "small" / "jax_jit.xplane.pb.gz").exists()
    from bundle import pack_bundle

    (out / "programs").mkdir()
    (out / "programs" / "jax_jit.baseline.0.log").write_text("program.py: ...\n")
    (out / "programs" / "jax_eager.fixed.0.log").write_text("program.py: ...\n")
    bundle = pack_bundle(out, [{"scenario": "jax_jit"}], 14.0)
    assert bundle["included"] == ["xplane jax_jit"]
    import tarfile

    with tarfile.open(bundle["path"]) as tar:
        names = tar.getnames()
    assert "xplane/jax_jit.xplane.pb.gz" in names
    assert "programs/jax_jit.baseline.0.log" in names  # --program-timing's runs, its own only
    assert "programs/jax_eager.fixed.0.log" not in names


# -- programs and the torch-free timing child ---------------------------------------------


def test_program_runs_the_step_loop_and_says_when_it_cannot(capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    pytest.importorskip("torch")  # the scenarios are PyTorch programs
    import program

    assert program.main(["healthy", "--device", "cpu", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "program.py: healthy (baseline, cpu): 3 steps in" in out
    assert re.search(r"ms/step, \d+ minor page faults/step", out)
    assert program.main(["jax_jit", "--device", "cpu"]) == program.EXIT_SKIPPED
    assert "cannot run here: needs CUDA" in capsys.readouterr().err
    assert program.main(["no_such_scenario"]) == 2


def test_jax_and_cupy_timing_child_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import argparse, sys; sys.path.insert(0, sys.argv[1]); import run\n"
        "ns = argparse.Namespace(device='cpu', rounds=1, steps=1, warmup=1, inflight=0)\n"
        "out = [run.run_scenario(n, ns, None)['status'] for n in ('jax_eager', 'cupy_pageable')]\n"
        "print(out, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, str(SCEN)], capture_output=True, text=True,
                       timeout=60, check=True)
    assert r.stdout.strip() == "['skipped', 'skipped'] False"


# -- one real record, advised as the suite does --------------------------------------------


def test_record_and_advise_a_scenario_program_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the scenarios are PyTorch programs
    import record_suite

    args = argparse.Namespace(device="cpu", program_seconds=None, record_timeout=120.0)
    meta = timing.ScenarioMeta.of(__import__("healthy"))
    rec = record_suite.record("healthy", meta, args, tmp_path)
    assert rec["rc"] == 0, rec
    assert rec["program_line"].startswith("program.py: healthy (baseline, cpu): 66 steps")
    adv = record_suite.advise(Path(rec["run"]), tmp_path / "rec" / "healthy.report.json", 120.0)
    assert "error" not in adv, adv
    assert adv["summary"]["step_source"] == "hook" and adv["summary"]["steps"] == 50
    report = json.loads((tmp_path / "rec" / "healthy.report.json").read_text())
    assert report["schema"] == "stepscope.report/1"
    assert [x["id"] for x in adv["findings"]] == [x["id"] for x in report["findings"]]


def test_the_recorded_program_plants_the_calibrated_work_of_the_timing_child(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import common

    calls: list[int] = []
    monkeypatch.setenv(common.CALIBRATIONS_ENV, '{"test:given": 7}')
    monkeypatch.setattr(common, "_CALIBRATIONS", {})
    assert common.calibrate("test:given", calls.append, 8.0) == 7 and calls == []
    assert common.calibrations() == {"test:given": 7}
    monkeypatch.setenv(common.CALIBRATIONS_ENV, "{}")  # not given: measured
    n = common.calibrate("test:measured", lambda k: sum(range(k)), 0.05)
    assert n >= 1 and common.calibrations()["test:measured"] == n
    import record_suite

    assert record_suite.CALIBRATIONS_ENV == common.CALIBRATIONS_ENV
