"""benchmarks/multigpu: the planted multi-GPU programs on the CPU (gloo, 2 processes), their
NCCL environment, the JAX program without JAX, the driver's commands and the scoring table on
synthetic summaries with hand-computed verdicts."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MGPU = Path(__file__).resolve().parents[2] / "benchmarks" / "multigpu"
for _p in (MGPU, MGPU.parent / "scenarios"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import registry
import run_suite
import score

PROGRAMS = sorted(p for p in MGPU.glob("*.py")
                  if p.stem in {s.name for s in registry.SCENARIOS})


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    for k in registry.NCCL_SAFE_ENV:
        e.pop(k, None)
    return e


def gloo_or_skip() -> None:
    torch = pytest.importorskip("torch")
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")


def torchrun(args: list[str], tmp: Path, timeout: float = 120.0) -> tuple[int, str]:
    """Two gloo processes. Their ranks aborted at interpreter exit (SIGABRT, "terminate called
    without an active exception") in 17 runs of 38 on a loaded 2-core box, until the harness
    collected the DDP models before destroying the group; an abort is still retried once, with
    the first attempt's lines that say why kept in the output."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           *args]
    why = ""
    for _ in range(2):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(),
                           cwd=tmp)
        out = r.stdout + r.stderr
        if r.returncode == 0 or "SIGABRT" not in out:
            return r.returncode, why + out
        why = "first attempt aborted: " + " | ".join(
            ln.strip() for ln in out.splitlines()
            if "terminate" in ln or "what()" in ln or "Exception" in ln or "Error" in ln)[:1500]
        why += "\n"
    return r.returncode, why + out


# -- the programs --------------------------------------------------------------------------


def test_every_scenario_has_a_program_that_sets_the_nccl_environment_before_torch() -> None:
    assert [p.stem for p in PROGRAMS] == sorted(s.name for s in registry.SCENARIOS)
    for p in PROGRAMS:
        tree = ast.parse(p.read_text())
        # every import but `import os` comes after the environment is set (torch, jax, and
        # the harness that imports torch)
        first_import = next(i for i, node in enumerate(tree.body)
                            if isinstance(node, (ast.Import, ast.ImportFrom))
                            and ast.unparse(node) != "import os")
        before = "\n".join(ast.unparse(n) for n in tree.body[:first_import])
        for k, v in registry.NCCL_SAFE_ENV.items():
            assert f"('{k}', '{v}')" in before, (p.name, k)
        assert "os.environ.setdefault" in before, p.name


def test_straggler_compare_and_one_trace_per_rank_on_two_gloo_processes(tmp_path: Path) -> None:
    gloo_or_skip()
    prof = tmp_path / "prof"
    rc, out = torchrun([str(MGPU / "ddp_straggler.py"), "--backend", "gloo", "--compare",
                        "--rounds", "2", "--steps", "2", "--warmup", "1", "--host-ms", "30",
                        "--profile", str(prof), "--profile-schedule", "0,1,1"], tmp_path)
    assert rc == 0, out[-2000:]
    line = registry.read_json_line(out)
    assert line is not None, out[-2000:]
    assert (line["program"], line["world_size"], line["backend"], line["variant"]) == \
        ("ddp_straggler", 2, "gloo", "compare")
    # 30 ms of busy loop on rank 1 per baseline step: every rank's baseline step waits for it
    # (a calibrated loop: on a loaded 2-core box it has come out at 29.7 ms)
    assert line["base_ms"] >= 27.0 and line["saving_ms"] > 15.0
    assert line["saving_pct"] == pytest.approx(100 * line["saving_ms"] / line["base_ms"], abs=0.1)
    assert len(line["per_rank_ms"]) == 2 and all(b >= 27.0 for b, _ in line["per_rank_ms"])
    assert line["info"]["baseline"]["straggler_rank"] == 1
    assert line["info"]["fixed"]["host_ms"] == 0.0
    names = sorted(p.name for p in prof.iterdir())
    assert names == ["ddp_straggler.rank0.pt.trace.json.gz",
                     "ddp_straggler.rank1.pt.trace.json.gz"]
    assert sorted(Path(t).name for t in line["profile"]["traces"]) == names


def test_the_extra_allreduce_program_times_its_steps(tmp_path: Path) -> None:
    gloo_or_skip()
    rc, out = torchrun([str(MGPU / "ddp_extra_allreduce.py"), "--steps", "3", "--warmup", "1"],
                       tmp_path)
    assert rc == 0, out[-2000:]
    line = registry.read_json_line(out)
    assert line is not None and line["variant"] == "base" and line["steps"] == 3
    assert line["median_step_ms"] > 0 and len(line["per_rank_median_ms"]) == 2
    assert line["info"]["extra_allreduce_bytes"] == 4 * line["info"]["params"] and line["info"]["item"] is True


def test_the_jax_program_says_why_it_cannot_run_without_jax(tmp_path: Path) -> None:
    try:
        import jax  # noqa: F401

        pytest.skip("JAX is installed here")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(MGPU / "jax_psum.py"), "--steps", "1"],
                       capture_output=True, text=True, timeout=60, env=env(), cwd=tmp_path)
    assert r.returncode == registry.EXIT_SKIPPED
    assert "jax_psum: cannot run here: needs JAX" in r.stderr
    assert registry.read_json_line(r.stdout) is None


def test_read_json_line_takes_the_last_result_line() -> None:
    text = 'noise {"x": 1}\n{"mgpu": 1, "a": 1}\nW1126 warning\n{"mgpu": 1, "a": 2}\n{broken\n'
    assert registry.read_json_line(text) == {"mgpu": 1, "a": 2}
    assert registry.read_json_line('{"other": 1}\n') is None


# -- the driver's commands -----------------------------------------------------------------


def test_the_driver_launches_torch_programs_with_torchrun_and_jax_in_one_process() -> None:
    cpu = run_suite.parse_args(["/tmp/x", "--device", "cpu", "--nproc", "2"])
    gpu = run_suite.parse_args(["/tmp/x", "--device", "cuda", "--nproc", "4",
                                "--only", "jax_psum,ddp_straggler"])
    assert gpu.names == ["jax_psum", "ddp_straggler"]
    t = run_suite.launch(registry.BY_NAME["ddp_straggler"], cpu)
    assert "--standalone" in t and "--nproc-per-node=2" in t
    assert t[-3:] == [str(MGPU / "ddp_straggler.py"), "--backend", "gloo"]
    assert run_suite.launch(registry.BY_NAME["ddp_straggler"], gpu)[-1].endswith(
        "ddp_straggler.py")
    j = run_suite.launch(registry.BY_NAME["jax_psum"], gpu)
    assert j[:2] == [sys.executable, str(MGPU / "jax_psum.py")] and j[-2:] == ["--devices", "4"]
    assert run_suite.launch(registry.BY_NAME["jax_psum"], cpu)[-2:] == ["--cpu-devices", "2"]
    with pytest.raises(SystemExit):
        run_suite.parse_args(["/tmp/x", "--only", "nope"])


def test_the_driver_keeps_the_rank_and_evidence_of_each_finding() -> None:
    report = {"findings": [
        {"id": "straggler", "severity": "critical", "est_saving_ms": 20.0,
         "est_saving_pct": 60.0, "confidence": "high", "title": "t",
         "where": {"rank": 1}, "evidence": ["a", "b", "c", "d", "e"]},
        {"id": "sync_calls", "severity": "info", "est_saving_ms": 0.1, "est_saving_pct": 0.3,
         "confidence": "high", "title": "u"}]}
    fs = run_suite.findings_of(report)
    assert [(f["id"], f["rank"]) for f in fs] == [("straggler", 1), ("sync_calls", None)]
    assert fs[0]["evidence"] == ["a", "b", "c", "d"] and fs[1]["evidence"] == []


def test_the_budget_cuts_a_phase_to_what_is_left() -> None:
    c = run_suite.Clock(100.0)
    c.t0 -= 70.0
    assert c.limit(150.0) == pytest.approx(30.0, abs=1.0)
    c.t0 -= 25.0
    assert c.limit(150.0) == run_suite.MIN_PHASE_S


# -- scoring -------------------------------------------------------------------------------

TIMING = {"baseline_ms": 32.0, "fixed_ms": 8.0, "saving_ms": 24.0, "saving_pct": 75.0}


def f(id_: str, severity: str, pct: float, rank: int | None = None,
      evidence: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": id_, "severity": severity, "est_saving_pct": pct,
            "est_saving_ms": pct * 0.32, "confidence": "high", "title": id_, "rank": rank,
            "evidence": list(evidence)}


def summary(name: str, rec: list[dict[str, Any]] | None, prof: list[dict[str, Any]] | None,
            **kw: Any) -> dict[str, Any]:
    s = registry.BY_NAME[name]
    d: dict[str, Any] = {**run_suite.new_summary(s, argparse.Namespace(nproc=2, device="cuda")),
                         "status": "ok", "timing": TIMING,
                         "record": {"status": "ok", "findings": rec} if rec is not None
                         else {"status": "error", "error": "record exited with 1"},
                         "profiler": {"status": "ok", "findings": prof}, **kw}
    return score.rescore(d)


def test_straggler_passes_only_when_first_on_the_planted_rank_within_30_percent() -> None:
    good = summary("ddp_straggler", [f("straggler", "critical", 66.0, 1),
                                     f("host_bound", "warning", 70.0, 1)],
                   [f("sync_calls", "info", 90.0), f("straggler", "critical", 90.0, 1)])
    rec, prof = good["score"]["record"], good["score"]["profiler"]
    assert rec["verdict"] == "pass" and rec["ratio_pct"] == 0.88  # 66 / 75
    assert rec["cause_named"] is False  # title "straggler", no evidence: no "host"
    assert "record: pass (cause host not named)" in score.verdict_cell(good)
    assert prof["ranked_first"] and prof["ratio_pct"] == 1.2 and prof["verdict"] == "pass"
    wrong_rank = summary("ddp_straggler", [f("straggler", "critical", 70.0, 0)], [])
    assert wrong_rank["score"]["record"]["rank_ok"] is False
    assert wrong_rank["score"]["record"]["verdict"] == "FAIL"
    assert wrong_rank["score"]["profiler"]["verdict"] == "FAIL"  # nothing found
    off = summary("ddp_straggler", [f("straggler", "warning", 40.0, 1)], None)
    assert off["score"]["record"]["verdict"] == "partial (estimate off)"  # 40 / 75 = 0.53
    other_first = summary("ddp_straggler", [f("host_bound", "critical", 70.0, 1),
                                            f("straggler", "warning", 75.0, 1)], [])
    assert other_first["score"]["record"]["verdict"] == "FAIL"
    assert other_first["score"]["record"]["expected_rank"] == 2


def test_healthy_fails_only_on_a_serious_communication_or_straggler_finding() -> None:
    ok = summary("ddp_balanced", [f("host_bound", "warning", 12.0),
                                  f("exposed_communication", "info", 3.0)], [])
    assert ok["score"]["record"]["verdict"] == "pass"
    assert ok["score"]["profiler"]["verdict"] == "pass"
    bad = summary("ddp_balanced", [f("straggler", "warning", 12.0, 1)],
                  [f("exposed_communication", "critical", 30.0)])
    assert bad["score"]["record"]["forbidden_found"] == ["straggler"]
    assert bad["score"]["profiler"]["verdict"] == "FAIL"
    none = summary("fsdp2", None, [])
    assert none["score"]["record"]["verdict"] == "no report"


def test_the_table_has_one_row_per_scenario_in_registry_order() -> None:
    rows = [summary("ddp_balanced", [], []),
            summary("ddp_straggler", [f("straggler", "critical", 66.0, 1, ("late by host "
                                                                          "time",))],
                    [f("straggler", "critical", 90.0, 1, ("Host: 25 ms",))]),
            {**run_suite.new_summary(registry.BY_NAME["fsdp2"],
                                     argparse.Namespace(nproc=2, device="cuda")),
             "status": "not run", "reason": "--budget 540 s (530 s used)"}]
    jx = summary("jax_psum", [f("exposed_communication", "warning", 50.0)], None)
    jx["profiler"] = {"status": "n/a", "why": "JAX program: no torch.profiler trace"}
    rows.append(score.rescore(jx))
    md = score.table(rows, {"nproc": 2, "device_name": "H100", "torch": "2.11", "jax": "0.11",
                            "rounds": 3, "block_steps": 10})
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert [ln.split(" | ")[0] for ln in lines[1:]] == [
        "| ddp_straggler", "| ddp_balanced", "| fsdp2", "| jax_psum"]
    assert lines[1] == ("| ddp_straggler | straggler rank 1 | straggler (critical, rank 1, est "
                        "66.0%) | straggler (critical, rank 1, est 90.0%) | 66.0% / 75.0% = "
                        "0.88 ok | 90.0% / 75.0% = 1.20 ok | 32.00 → 8.00 ms (24.00 ms, 75.0%) "
                        "| record: pass; profiler: pass |")
    assert "| fsdp2 | (healthy) | not run: --budget 540 s (530 s used) |" in md
    assert "n/a (JAX program: no torch.profiler trace)" in lines[4]
    assert "0.67 off" in lines[4] and "record: partial (estimate off)" in lines[4]
    assert "record: 2/3 pass." in md and "profiler: 2/2 pass." in md


def test_score_cli_reads_a_suite_folder_and_rejects_a_missing_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "summaries").mkdir()
    s = summary("ddp_straggler", [f("straggler", "critical", 66.0, 1)], [])
    (tmp_path / "summaries" / "ddp_straggler.json").write_text(json.dumps(s))
    assert score.main([str(tmp_path)]) == 0
    assert "| ddp_straggler | straggler rank 1 |" in capsys.readouterr().out
    assert score.main([str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    both = tmp_path / "summary.json"  # run_suite.py's summary.json: {"meta", "scenarios"}
    both.write_text(json.dumps({"meta": {"nproc": 4, "device_name": "H200", "timing":
                                         "separate", "rounds": 3, "separate_steps": 30},
                                "scenarios": [s, summary("ddp_balanced", [], [])]}))
    assert score.main([str(both)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 × H200;") and "3 launches per variant, alternating, 30 steps" in out
    assert "| ddp_balanced | (healthy) |" in out and "| ddp_straggler |" in out
    (tmp_path / "bad.json").write_text("[1]")
    assert score.main([str(tmp_path / "bad.json")]) == 2


def test_the_bundle_keeps_summaries_and_reports_first_and_leaves_out_what_does_not_fit(
        tmp_path: Path) -> None:
    for rel, size in (("meta.json", 10), ("summaries/a.json", 10), ("logs/a.record.log", 10),
                      ("rec/a.report.json", 10), ("traces/a/a.rank0.pt.trace.json.gz", 1000),
                      ("rec/a/manifest.json", 3 * 2**20)):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
    res = run_suite.pack_bundle(tmp_path, ["a"], limit_mb=2.0)
    import tarfile

    with tarfile.open(tmp_path / "bundle.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"meta.json", "summaries/a.json", "logs/a.record.log", "rec/a.report.json",
            "traces/a/a.rank0.pt.trace.json.gz"} <= names
    assert "rec/a/manifest.json" not in names and res["left_out"] == ["rec/a"]
    dest = tmp_path / "copy"
    (tmp_path / "accuracy.md").write_text("t")
    run_suite.copy_results(tmp_path, dest, bundle=True)
    assert sorted(p.name for p in dest.iterdir()) == ["accuracy.md", "bundle.tar.gz"]
