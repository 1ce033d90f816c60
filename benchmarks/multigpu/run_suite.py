#!/usr/bin/env python3
"""The multi-GPU planted suite on one machine with N GPUs: for each scenario, the measured
saving of its fix (untraced), stepscope's advice on a recorded run and on torch.profiler traces,
scored; results written as they come (a killed suite leaves every finished phase on disk).

    PYTHONPATH=src:/tmp/site python3 benchmarks/multigpu/run_suite.py OUT [--nproc N]
        [--only a,b] [--budget S] [--rounds R] [--block-steps M]

Per scenario, one after the other (nothing else runs during a measurement):

1. **compare + traces** (one launch): ``torchrun --standalone --nproc-per-node=N PROGRAM
   --compare --rounds R --steps M --profile OUT/traces/NAME``: baseline and fixed built in the
   same processes and timed interleaved, untraced (R rounds of M steps each, order alternating,
   medians; ``harness.py``), then the baseline traced with torch.profiler on every rank (one
   file per rank). JAX (one process over the GPUs): ``python jax_psum.py --compare``; no
   importable trace.
2. **record**: ``python -m stepscope record -o OUT/rec/NAME --quiet -- torchrun ... PROGRAM``
   (record's default window: the optimizer step hook, 66 steps; JAX: the time window, 14 s),
   then ``python -m stepscope report OUT/rec/NAME --format json -o OUT/rec/NAME.report.json``.
3. **torch.profiler**: ``python -m stepscope import OUT/traces/NAME/*.json.gz -o OUT/prof/NAME``,
   then ``stepscope report --format json`` into OUT/prof/NAME.report.json.
4. **score** (``score.py``): OUT/summaries/NAME.json (measured saving, both paths' findings with
   their estimated savings and ranks, verdicts), OUT/accuracy.md (the table), OUT/meta.json.

A failed phase is noted in the summary and the suite goes on (a CPU dry run: ``--device cpu``,
gloo, record finds no GPU). ``--budget S`` (default 540): start no scenario likely to end after
S seconds, and cut a phase's time limit to what is left; the rest are listed as not run.
``--copy-to DIR`` copies summaries, table and the report JSONs there after every phase.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCEN = HERE.parent / "scenarios"
for _p in (str(HERE), str(SCEN)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import record_report as rr  # noqa: E402  (the single-GPU suite's helpers, torch-free)
import record_suite  # noqa: E402
import score  # noqa: E402
from registry import (  # noqa: E402
    BY_NAME,
    EXIT_SKIPPED,
    HOOK_STEPS,
    SCENARIOS,
    TIMED_SECONDS,
    Scenario,
    read_json_line,
)

# Likely wall time of one scenario on 2 GPUs (for --budget): three launches, two reports.
EXPECTED_S = {"torchrun": 60.0, "python": 45.0 + TIMED_SECONDS}
MIN_PHASE_S = 20.0
EVIDENCE_LINES = 4


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Commands


def torchrun() -> list[str]:
    exe = shutil.which("torchrun")
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]


def launch(s: Scenario, args: argparse.Namespace) -> list[str]:
    """The command that starts the scenario's program on N GPUs (N CPU processes on the CPU)."""
    prog = str(HERE / s.script)
    if s.torch:
        cmd = [*torchrun(), "--standalone", f"--nproc-per-node={args.nproc}", prog]
        return cmd + (["--backend", "gloo"] if args.device == "cpu" else [])
    cmd = [sys.executable, prog]
    return cmd + (["--cpu-devices", str(args.nproc)] if args.device == "cpu"
                  else ["--devices", str(args.nproc)])


def stepscope(*a: str) -> list[str]:
    return [sys.executable, "-m", "stepscope", *a]


class Clock:
    """The suite's budget: a phase gets its own limit, cut to what is left."""

    def __init__(self, budget: float) -> None:
        self.t0 = time.perf_counter()
        self.budget = budget

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def limit(self, want: float) -> float:
        return max(MIN_PHASE_S, min(want, self.budget - self.elapsed))


def run(cmd: list[str], limit: float, log_path: Path) -> dict[str, Any]:
    """``record_suite.run_limited`` (own process group, time limit, ended on SIGTERM) with the
    exit status, wall time, log and the log's last lines on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    rc, wall = record_suite.run_limited(cmd, limit, log_path)
    res: dict[str, Any] = {"command": " ".join(cmd), "rc": rc, "wall_s": round(wall, 2),
                           "log": str(log_path)}
    if rc == "timeout":
        res["error"] = f"timed out after {limit:.0f} s: {rr.last_lines(log_path)}"
    elif rc == EXIT_SKIPPED:
        res["error"] = f"cannot run here: {rr.last_lines(log_path, 1)}"
    elif rc != 0:
        res["error"] = f"exited with {rc}: {rr.last_lines(log_path)}"
    return res


# ---------------------------------------------------------------------------------------------
# Reports


def findings_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The condensed findings (``record_report``) with the rank each names and its evidence."""
    cond = rr.condense_report(report)["findings"]
    for c, f in zip(cond, report.get("findings", [])):
        where = f.get("where") or {}
        c["rank"] = where.get("rank")
        c["evidence"] = [str(e)[:200] for e in (f.get("evidence") or [])[:EVIDENCE_LINES]]
    return cond


def report_of(run_dir: Path, dest: Path, limit: float, logs: Path) -> dict[str, Any]:
    """``stepscope report RUN --format json -o DEST`` and what the summary keeps of it."""
    if not (run_dir / "manifest.json").exists():
        return {"status": "error", "error": "no run was written"}
    if dest.exists():
        dest.unlink()
    res = run(stepscope("report", str(run_dir), "--format", "json", "-o", str(dest), "--quiet"),
              limit, logs)
    out: dict[str, Any] = {"report": str(dest), "report_wall_s": res["wall_s"]}
    if not dest.exists():
        return {**out, "status": "error", "error": res.get("error") or "no report written"}
    report = json.loads(dest.read_text())
    cond = rr.condense_report(report)
    run_meta = report.get("run") or {}
    out.update(status="ok", findings=findings_of(report), skipped=cond["skipped"],
               summary=cond["summary"], diagnostics=cond["diagnostics"],
               run_ranks=run_meta.get("ranks"), ranks=(report.get("ranks") or [])[:16],
               breakdown=report.get("breakdown"))
    return out


# ---------------------------------------------------------------------------------------------
# One scenario


def phase_compare(s: Scenario, args: argparse.Namespace, out: Path, clock: Clock,
                  summ: dict[str, Any]) -> None:
    traces = out / "traces" / s.name
    if traces.exists():
        shutil.rmtree(traces)
    if args.timing == "separate":
        phase_separate(s, args, out, clock, summ, traces)
        return
    cmd = launch(s, args) + ["--compare", "--rounds", str(args.rounds), "--steps",
                             str(args.block_steps), "--warmup", str(args.warmup)]
    if s.torch:
        cmd += ["--profile", str(traces)]
    res = run(cmd, clock.limit(args.timeout), out / "logs" / f"{s.name}.compare.log")
    line = read_json_line(Path(res["log"]).read_text(errors="replace"))
    summ["compare"] = res
    if res["rc"] == EXIT_SKIPPED:
        summ["status"] = "skipped"
        summ["reason"] = res.get("error")
    if line:
        summ["timing"] = {"baseline_ms": line["base_ms"], "fixed_ms": line["fix_ms"],
                          "saving_ms": line["saving_ms"], "saving_pct": line["saving_pct"],
                          "blocks": line.get("timing"), "per_rank_ms": line.get("per_rank_ms")}
        summ["info"] = line.get("info")
        summ["program"] = {k: line.get(k) for k in ("world_size", "backend", "device", "gpu",
                                                    "torch", "jax")}
    summ["traces"] = sorted(glob.glob(str(traces / "*.pt.trace.json.gz")))


def phase_separate(s: Scenario, args: argparse.Namespace, out: Path, clock: Clock,
                   summ: dict[str, Any], traces: Path) -> None:
    """``--timing separate``: ``--rounds`` launches of each variant, alternating (BF, FB, ...),
    each timing ``--separate-steps`` steps; medians of the launches' median step times. The
    first baseline launch also writes the traces."""
    import statistics

    runs: dict[str, list[float]] = {"base": [], "fix": []}
    launches: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for variant in (("base", "fix") if r % 2 == 0 else ("fix", "base")):
            cmd = launch(s, args) + ["--steps", str(args.separate_steps), "--warmup",
                                     str(args.warmup)] + (["--fix"] if variant == "fix" else [])
            if s.torch and variant == "base" and not runs["base"]:
                cmd += ["--profile", str(traces)]
            res = run(cmd, clock.limit(args.timeout),
                      out / "logs" / f"{s.name}.{variant}{r}.log")
            line = read_json_line(Path(res["log"]).read_text(errors="replace"))
            res["median_step_ms"] = line.get("median_step_ms") if line else None
            launches.append(res)
            if res["rc"] == EXIT_SKIPPED:
                summ.update(status="skipped", reason=res.get("error"), compare=launches)
                return
            if line and line.get("median_step_ms") is not None:
                runs[variant].append(float(line["median_step_ms"]))
                summ["info"] = line.get("info")
                summ["program"] = {k: line.get(k) for k in ("world_size", "backend", "device",
                                                            "gpu", "torch", "jax")}
    summ["compare"] = {"mode": "separate", "launches": launches,
                       "rc": next((x["rc"] for x in launches if x["rc"] != 0), 0),
                       "error": next((x["error"] for x in launches if x.get("error")), None)}
    if runs["base"] and runs["fix"]:
        b, f = statistics.median(runs["base"]), statistics.median(runs["fix"])
        summ["timing"] = {"baseline_ms": round(b, 4), "fixed_ms": round(f, 4),
                          "saving_ms": round(b - f, 4),
                          "saving_pct": round(100 * (b - f) / b, 2) if b > 0 else 0.0,
                          "mode": "separate", "baseline_runs_ms": runs["base"],
                          "fixed_runs_ms": runs["fix"]}
    summ["traces"] = sorted(glob.glob(str(traces / "*.pt.trace.json.gz")))


def phase_record(s: Scenario, args: argparse.Namespace, out: Path, clock: Clock,
                 summ: dict[str, Any]) -> None:
    rec = out / "rec" / s.name
    if rec.exists():
        shutil.rmtree(rec)
    rec.parent.mkdir(parents=True, exist_ok=True)
    length = ["--steps", str(args.record_steps)] if s.torch else \
        ["--seconds", f"{args.program_seconds:g}"]
    cmd = stepscope("record", "-o", str(rec), "--quiet", "--", *launch(s, args), *length)
    want = args.record_timeout + (0.0 if s.torch else args.program_seconds)
    res = run(cmd, clock.limit(want), out / "logs" / f"{s.name}.record.log")
    line = read_json_line(Path(res["log"]).read_text(errors="replace"))
    res["program_line"] = line
    res.update(report_of(rec, out / "rec" / f"{s.name}.report.json",
                         clock.limit(args.report_timeout), out / "logs" / f"{s.name}.rec-report.log"))
    summ["record"] = res


def phase_profiler(s: Scenario, args: argparse.Namespace, out: Path, clock: Clock,
                   summ: dict[str, Any]) -> None:
    if not s.torch:
        summ["profiler"] = {"status": "n/a", "why": "JAX program: no torch.profiler trace"}
        return
    traces = summ.get("traces") or []
    if not traces:
        summ["profiler"] = {"status": "error", "error": "the compare launch wrote no trace"}
        return
    prof = out / "prof" / s.name
    res = run(stepscope("import", *traces, "-o", str(prof), "--force", "--quiet"),
              clock.limit(args.report_timeout), out / "logs" / f"{s.name}.import.log")
    res["traces"] = len(traces)
    res.update(report_of(prof, out / "prof" / f"{s.name}.report.json",
                         clock.limit(args.report_timeout), out / "logs" / f"{s.name}.prof-report.log"))
    summ["profiler"] = res


def new_summary(s: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    return {"scenario": s.name, "expected": s.expected, "late_rank": s.late_rank,
            "cause": s.cause,
            "forbidden": list(s.forbidden), "planted": s.planted, "fix": s.fix,
            "launch": s.launch, "nproc": args.nproc, "device": args.device, "status": "running"}


def run_scenario(s: Scenario, args: argparse.Namespace, out: Path, clock: Clock,
                 save: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    summ = new_summary(s, args)
    phases = (("compare", phase_compare), ("record", phase_record),
              ("profiler", phase_profiler))
    for label, fn in phases:
        if summ.get("status") == "skipped":
            break
        try:
            fn(s, args, out, clock, summ)
        except Exception as exc:  # noqa: BLE001 - one phase must not stop the suite
            summ.setdefault("errors", []).append(f"{label}: {type(exc).__name__}: {exc}")
            log(f"    {label}: ERROR {type(exc).__name__}: {exc}")
        summ["wall_s"] = round(time.perf_counter() - t0, 1)
        save(score.rescore(summ))  # partial results survive a kill
        log(f"    {label}: {phase_line(summ, label)}")
    if summ.get("status") != "skipped":
        summ["status"] = "ok" if summ.get("timing") else "error"
        if not summ.get("timing"):
            summ["error"] = (summ.get("compare") or {}).get("error", "no timing")
    summ = score.rescore(summ)
    summ["wall_s"] = round(time.perf_counter() - t0, 1)
    return summ


def phase_line(summ: dict[str, Any], label: str) -> str:
    if label == "compare":
        t = summ.get("timing")
        if not t:
            return (summ.get("compare") or {}).get("error", "no timing")
        return (f"{t['baseline_ms']:.2f} -> {t['fixed_ms']:.2f} ms ({t['saving_pct']:.1f}%), "
                f"{len(summ.get('traces') or [])} trace(s)")
    p = summ.get(label) or {}
    if p.get("status") == "n/a":
        return "n/a"
    if p.get("status") != "ok":
        return f"error: {p.get('error')}"
    fs = [f for f in p.get("findings", []) if f.get("severity") in score.SERIOUS]
    return ("top " + ", ".join(f"{f['id']}({f['severity']}, rank {f.get('rank')}, "
                               f"{f.get('est_saving_pct') or 0:.1f}%)" for f in fs[:3])
            if fs else "no warning/critical finding")


# ---------------------------------------------------------------------------------------------
# The suite


def suite_meta(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    ns = argparse.Namespace(device=args.device, rounds=args.rounds, steps=args.block_steps,
                            warmup=args.warmup, inflight=2, program_seconds=args.program_seconds,
                            names=names)
    meta = rr.suite_meta(ns, sys.argv)
    meta.update(nproc=args.nproc, timing=args.timing, block_steps=args.block_steps,
                separate_steps=args.separate_steps, record_steps=args.record_steps,
                torch=(meta.get("versions") or {}).get("torch"),
                jax=(meta.get("versions") or {}).get("jax"), budget_s=args.budget,
                env={k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE",
                                                    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                    "NVSHMEM_DISABLE_NVLS")})
    return meta


def default_nproc(device: str) -> int:
    if device == "cpu":
        return 2
    try:
        import subprocess

        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                           check=False)
        n = sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU "))
        return max(1, n)
    except (OSError, subprocess.TimeoutExpired):
        return 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output folder")
    ap.add_argument("--nproc", type=int, default=None, help="GPUs / ranks (default: all GPUs)")
    ap.add_argument("--only", default="", help="comma-separated scenarios, in this order")
    ap.add_argument("--skip", default="", help="comma-separated scenarios to leave out")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="cpu: a dry run with gloo (default: cuda when nvidia-smi is there)")
    ap.add_argument("--timing", choices=("interleaved", "separate"), default="interleaved",
                    help="interleaved: both variants in one launch (default); separate: one "
                         "launch per variant and round, alternating")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (3)")
    ap.add_argument("--separate-steps", type=int, default=30,
                    help="--timing separate: steps timed per launch (30)")
    ap.add_argument("--block-steps", type=int, default=10, help="steps per timing block (10)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per variant (5)")
    ap.add_argument("--record-steps", type=int, default=HOOK_STEPS,
                    help=f"steps of a recorded torch program ({HOOK_STEPS}: record's default "
                         "window is 3 warm-up + 50 steps)")
    ap.add_argument("--program-seconds", type=float, default=TIMED_SECONDS,
                    help=f"length of a recorded JAX program ({TIMED_SECONDS:g} s)")
    ap.add_argument("--timeout", type=float, default=150.0, help="compare launch limit, s")
    ap.add_argument("--record-timeout", type=float, default=120.0, help="record limit, s")
    ap.add_argument("--report-timeout", type=float, default=120.0,
                    help="import / report limit, s")
    ap.add_argument("--budget", type=float, default=540.0,
                    help="start no scenario likely to end after S seconds (540)")
    ap.add_argument("--copy-to", default=None,
                    help="also copy accuracy.md, summary.json, bundle.tar.gz here")
    ap.add_argument("--bundle-mb", type=float, default=14.0,
                    help="size limit of bundle.tar.gz's traces and runs (14)")
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if shutil.which("nvidia-smi") else "cpu"
    if args.nproc is None:
        args.nproc = default_nproc(args.device)
    names = [n for n in (args.only.split(",") if args.only else [s.name for s in SCENARIOS])
             if n]
    skip = {n for n in args.skip.split(",") if n}
    unknown = [n for n in [*names, *skip] if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}; known: "
                 f"{', '.join(s.name for s in SCENARIOS)}")
    args.names = [n for n in names if n not in skip]
    return args


def copy_results(out: Path, dest: Path | None, bundle: bool = False) -> None:
    """accuracy.md and summary.json (and bundle.tar.gz) into ``dest``: three files, as the
    device machine returns at most 8."""
    if dest is None:
        return
    dest.mkdir(parents=True, exist_ok=True)
    for rel in ("accuracy.md", "summary.json", *(("bundle.tar.gz",) if bundle else ())):
        if (out / rel).exists():
            shutil.copy2(out / rel, dest / rel)


def pack_bundle(out: Path, names: list[str], limit_mb: float) -> dict[str, Any]:
    """out/bundle.tar.gz: summaries, meta, logs and report JSONs first, then the torch.profiler
    traces and the recorded/imported runs while they fit ``limit_mb``."""
    import tarfile

    first: list[Path] = [out / "meta.json", out / "accuracy.md"]
    later: list[Path] = []
    for n in names:
        first += [out / "summaries" / f"{n}.json", *sorted((out / "logs").glob(f"{n}.*")),
                  out / "rec" / f"{n}.report.json", out / "prof" / f"{n}.report.json"]
        later += [out / "traces" / n]
    later += [out / d / n for d in ("rec", "prof") for n in names]
    limit = int(limit_mb * 2**20)
    dest = out / "bundle.tar.gz"
    total, left_out = 0, []
    with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
        for p in first:
            if p.is_file():
                tar.add(p, arcname=str(p.relative_to(out)))
                total += p.stat().st_size
        for p in later:
            if not p.exists():
                continue
            size = rr.tree_bytes(p) if p.is_dir() else p.stat().st_size
            if total + size > limit:
                left_out.append(str(p.relative_to(out)))
                continue
            tar.add(p, arcname=str(p.relative_to(out)))
            total += size
    return {"bytes": dest.stat().st_size, "left_out": left_out}


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_limited, which ends its child group


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "summaries").mkdir(exist_ok=True)
    copy_to = Path(args.copy_to).resolve() if args.copy_to else None
    meta = suite_meta(args, args.names)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    clock = Clock(args.budget)
    log(f"multigpu suite: {len(args.names)} scenario(s), {args.nproc} x "
        f"{meta.get('device_name', args.device)} -> {out}")
    done: dict[str, dict[str, Any]] = {}

    def save(summ: dict[str, Any]) -> None:
        done[summ["scenario"]] = summ
        (out / "summaries" / f"{summ['scenario']}.json").write_text(
            json.dumps(summ, indent=1, default=str))
        meta["suite_wall_s"] = round(clock.elapsed, 1)
        (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        (out / "summary.json").write_text(json.dumps({"meta": meta, "scenarios":
                                                      list(done.values())}, indent=1,
                                                     default=str))
        (out / "accuracy.md").write_text(score.table(list(done.values()), meta))
        copy_results(out, copy_to)

    def bundle() -> None:
        try:
            meta["bundle"] = pack_bundle(out, list(done), args.bundle_mb)
        except OSError as exc:
            meta["bundle"] = {"error": str(exc)}
        copy_results(out, copy_to, bundle=True)

    for i, name in enumerate(args.names, 1):
        s = BY_NAME[name]
        log(f"[{i}/{len(args.names)}] {name} ({clock.elapsed:.0f} s)")
        if clock.elapsed + EXPECTED_S[s.launch] > args.budget:
            summ = {**new_summary(s, args), "status": "not run",
                    "reason": f"--budget {args.budget:g} s ({clock.elapsed:.0f} s used)"}
        else:
            summ = run_scenario(s, args, out, clock, save)
        save(summ)
        bundle()
        log(f"    {summ['status']} in {summ.get('wall_s', 0)} s: {score.verdict_cell(summ)}")
    log(f"suite: {clock.elapsed:.0f} s")
    log((out / "accuracy.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
