#!/usr/bin/env python3
"""The planted-bottleneck suite through ``stepscope record``: for every scenario, the measured
saving of its fix, the advice on a torch.profiler trace, and the advice on a recorded run.

    PYTHONPATH=src:/tmp/site python3 benchmarks/scenarios/record_suite.py --out DIR
        [--only a,b] [--skip a,b] [--device cuda|cpu] [--rounds R] [--copy-to DIR2]
    python3 benchmarks/scenarios/record_suite.py --out ALL --merge DIR1,DIR2   # no GPU

Per scenario, one after the other (nothing runs beside a measurement):

1. ``run.py --child NAME`` (the existing harness, in its own process, with a time limit):
   baseline and fixed timed interleaved, untraced (the measured saving); for torch scenarios
   the baseline is also traced with torch.profiler and imported + advised; JAX and CuPy
   scenarios are timed only.
2. ``python -m stepscope record -o DIR/rec/NAME --quiet -- python program.py NAME``: the
   baseline as a user's program, with record's DEFAULT window (no option but -o and --quiet).
3. The advisor on that run (``stepscope.reporters.report.build_report``, the JSON report of ``stepscope
   report --format json``) in a child process with a time limit: DIR/rec/NAME.report.json.
4. Both paths scored alike (``timing.score_first_serious``): the first warning/critical finding
   is the planted rule? its est_saving_pct within +-30% of the measured saving (% of the
   untraced baseline step)? the healthy run: no warning/critical finding?

DIR/results.json and DIR/accuracy.md are rewritten after every scenario (a killed suite leaves
a partial table); DIR/scenarios/NAME.json holds each result; DIR/bundle.tar.gz (at the end)
holds those, every report JSON, program log and torch.profiler trace, and as many JAX XSpace
traces and recorded runs as fit ``--bundle-mb``. ``--copy-to`` copies results.json, accuracy.md
and the bundle to a second folder as they are written (e.g. the device machine's $OUT, which
returns at most 8 files of 16 MiB), and each JAX scenario's XSpace trace gzipped beside them
(``NAME.xplane.pb.gz``, see ``keep_xplane``): 4 JAX scenarios + 3 = 7 files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import record_report as rr  # after the sys.path setup
import timing
import variants
from bundle import pack_bundle
from remedy_score import score_result
from timing import CALIBRATIONS_ENV

KILL_GRACE_S = 15.0


def log(msg: str) -> None:
    print(msg, flush=True)


def child_env() -> dict[str, str]:
    """This tree's ``src`` first on PYTHONPATH (``-m stepscope`` and the record bootstrap)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group (record forwards it to the program and still writes
    what it has), SIGKILL after a grace."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_limited(cmd: list[str], timeout: float, log_path: Path | None = None,
                env: dict[str, str] | None = None) -> tuple[int | str, float]:
    """Run ``cmd`` in a process group of its own (same session: whatever ends this suite's
    session ends it too) with a time limit; the group is ended on timeout and when this
    process is interrupted. Returns (exit code or "timeout", wall seconds)."""
    t0 = time.perf_counter()
    out = open(log_path, "wb") if log_path else None  # noqa: SIM115 - closed below
    proc = None
    try:
        proc = subprocess.Popen(cmd, env={**child_env(), **(env or {})}, stdout=out or None,
                                stderr=subprocess.STDOUT if out else None, process_group=0)
        try:
            rc: int | str = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
    finally:
        if proc is not None and proc.poll() is None:
            _end_group(proc)
        if out:
            out.close()
    return rc, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# The three steps of one scenario


def time_and_trace(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """run.py's child for NAME (timing; torch.profiler trace + advice for torch scenarios)."""
    import run

    child = argparse.Namespace(timeout=args.timeout, rounds=args.rounds, warmup=args.warmup,
                               device=args.device, inflight=args.inflight, steps=args.steps,
                               no_advise=False)
    (out / "torch").mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = run.run_child(name, child, out / "torch")
    return res


def keep_xplane(name: str, trace: dict[str, Any] | None, out: Path,
                copy_to: Path | None, limit_mb: float = 15.5) -> dict[str, Any] | None:
    """A JAX scenario's ``.xplane.pb`` (``jaxtrace.trace_jax``'s ``path``) gzipped to
    ``out/xplane/NAME.xplane.pb.gz`` (the bundle takes it while it fits), and copied to
    ``copy_to`` as a file of its own when under ``limit_mb`` (the device machine returns files
    of at most 16 MiB). None when there is no trace."""
    import gzip
    import shutil

    src = Path(trace["path"]) if trace and trace.get("path") else None
    if src is None or not src.is_file():
        return None
    dest = out / "xplane" / f"{name}.xplane.pb.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fi, gzip.open(dest, "wb", compresslevel=6) as fo:
        shutil.copyfileobj(fi, fo)
    kept: dict[str, Any] = {"path": str(dest), "bytes": src.stat().st_size,
                            "gz_bytes": dest.stat().st_size, "copied": None}
    if copy_to is not None:
        if kept["gz_bytes"] <= limit_mb * 2**20:
            copy_to.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dest, copy_to / dest.name)
            kept["copied"] = str(copy_to / dest.name)
        else:
            kept["copied"] = f"no: {kept['gz_bytes'] / 2**20:.1f} MiB > {limit_mb:g} MiB"
    return kept


def time_programs(name: str, args: argparse.Namespace, out: Path,
                  calibrations: dict[str, int] | None = None) -> dict[str, Any]:
    """The program's own saving: ``program.py NAME`` and ``program.py NAME --variant V`` for
    every fix variant, each in a process of its own for ``--program-seconds-each`` s, the order
    reversed every other round, for ``--program-rounds`` rounds; medians of their ms/step (the
    steady ones after ``--program-warmup-steps`` where given). The same keys as the harness's
    timing (``saving_ms``, ``saving_pct``... of the default variant), and ``variants``: each
    variant's runs and median; ``calibrations`` as ``record`` passes them."""
    import statistics

    vs = [v.name for v in variants.variants_of(importlib.import_module(name))]
    ms: dict[str | None, list[float]] = {n: [] for n in [None, *vs]}
    logs = out / "programs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    order = list(ms)
    for i in range(args.program_rounds):
        for variant in timing.round_order(order, i):
            cmd = [sys.executable, str(HERE / "program.py"), name, "--device", args.device,
                   "--seconds", f"{args.program_seconds_each:g}",
                   "--warmup-steps", str(args.program_warmup_steps)]
            cmd += ["--variant", variant] if variant is not None else []
            label = "baseline" if variant is None else (
                "fixed" if variant == vs[0] else f"variant-{variant}")
            log_path = logs / f"{name}.{label}.{i}.log"
            env = {CALIBRATIONS_ENV: json.dumps(calibrations)} if calibrations else None
            rc, _ = run_limited(cmd, args.program_seconds_each + 120.0, log_path, env)
            got = rr.program_steady_ms(log_path) if rc == 0 else None
            if got is None:
                return {"error": f"program.py {name} ({label}) exited with {rc}: "
                                 f"{rr.last_lines(log_path)}"}
            ms[variant].append(got)
    base = statistics.median(ms[None])

    def saving(fixed: float) -> dict[str, float]:
        return {"fixed_ms": round(fixed, 4), "saving_ms": round(base - fixed, 4),
                "saving_pct": round(100.0 * (base - fixed) / base, 2) if base > 0 else 0.0}

    per = {v: {"runs_ms": ms[v], **saving(statistics.median(ms[v]))} for v in vs}
    return {"source": "program.py", "rounds": args.program_rounds,
            "seconds_each": args.program_seconds_each,
            "warmup_steps": args.program_warmup_steps,
            "baseline_runs_ms": ms[None], "fixed_runs_ms": ms[vs[0]] if vs else [],
            "baseline_ms": round(base, 4),
            **{k: x for k, x in (per[vs[0]] if vs else {}).items() if k != "runs_ms"},
            "variants": per,
            "wall_s": round(time.perf_counter() - t0, 1)}


def record(name: str, meta: timing.ScenarioMeta, args: argparse.Namespace,
           out: Path, calibrations: dict[str, int] | None = None) -> dict[str, Any]:
    """``stepscope record`` (default window) on ``program.py NAME``; ``calibrations``: the
    timing child's (``common.calibrate``), so the program plants the work that was timed."""
    import shutil

    run_dir = out / "rec" / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    prog = [sys.executable, str(HERE / "program.py"), name, "--device", args.device]
    if args.program_seconds is not None and not meta.step_hook:
        prog += ["--seconds", f"{args.program_seconds:g}"]
    cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(run_dir), "--quiet", "--",
           *prog]
    length = (meta.program_seconds or 0.0) if args.program_seconds is None \
        else args.program_seconds
    limit = args.record_timeout + length
    log_path = out / "rec" / f"{name}.log"
    env = {CALIBRATIONS_ENV: json.dumps(calibrations)} if calibrations else None
    rc, wall = run_limited(cmd, limit, log_path, env)
    res: dict[str, Any] = {"command": " ".join(cmd[1:]), "rc": rc, "wall_s": round(wall, 2),
                           "calibrations": calibrations or {},
                           "run": str(run_dir), "log": str(log_path),
                           "run_bytes": rr.tree_bytes(run_dir)}
    res["program_line"] = rr.program_line(log_path)
    if rc == "timeout":
        res["error"] = f"record timed out after {limit:.0f} s"
    elif rc != 0:
        res["error"] = f"record exited with {rc}: {rr.last_lines(log_path)}"
    return res


def advise(run_dir: Path, dest: Path, timeout: float,
           untraced_step_ms: float | None = None) -> dict[str, Any]:
    """The JSON report of a recorded run, made in a child process (``--advise``); with
    ``untraced_step_ms``, its remedies calibrated to that step (``--untraced-step-ms``)."""
    if not (run_dir / "manifest.json").exists():
        return {"error": "no run was written"}
    if dest.exists():
        dest.unlink()
    errlog = dest.with_suffix(".advise.log")
    cal = [] if untraced_step_ms is None else ["--untraced-step-ms", str(untraced_step_ms)]
    rc, wall = run_limited([sys.executable, str(Path(__file__).resolve()), "--advise",
                            str(run_dir), "--json", str(dest), *cal], timeout, errlog)
    if not dest.exists():
        why = "timed out" if rc == "timeout" else f"exited with {rc}"
        return {"error": f"advisor {why} after {wall:.0f} s: {rr.last_lines(errlog)}"}
    report = json.loads(dest.read_text())
    return {"advise_wall_s": round(wall, 2), "report": str(dest), **rr.condense_report(report)}


def advise_child(run_dir: str, dest: str, untraced_step_ms: float | None = None) -> int:
    """In the child: build the report (analysis + advice) and write it as JSON."""
    from stepscope.reporters.json_report import report_dict
    from stepscope.reporters.report import build_report
    from stepscope.store.run import Run

    t0 = time.perf_counter()
    report = build_report(Run(run_dir), untraced_step_ms=untraced_step_ms)
    d = report_dict(report)
    d["suite"] = {"analyze_advise_s": round(time.perf_counter() - t0, 3)}
    Path(dest).write_text(json.dumps(d, ensure_ascii=False))
    return 0


# ---------------------------------------------------------------------------------------------
# One scenario, and the suite


def run_scenario(name: str, args: argparse.Namespace, out: Path,
                 copy_to: Path | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    meta = meta_of(name)
    res: dict[str, Any] = {"scenario": name, "expected": meta.expected,
                           "description": meta.description, "framework": meta.framework,
                           "table": meta.table, "step_hook": meta.step_hook}
    try:
        tt = time_and_trace(name, args, out)
        res["timing"] = tt.get("timing")
        res["variants"] = tt.get("variants")
        res["variants_timing"] = tt.get("variants_timing")
        if args.program_rounds and name in args.program_timing and res["timing"]:
            prog = time_programs(name, args, out, tt.get("calibrations"))
            if "error" in prog:
                res["program_timing_error"] = prog["error"]
            else:  # the measured saving is the program's own loop's (the harness's kept)
                res["timing_harness"], res["timing"] = res["timing"], prog
        res["info"] = tt.get("info")
        res["torch_child"] = {k: tt.get(k) for k in ("status", "reason", "error", "child_rc",
                                                     "advice_error", "wall_s", "trace")}
        if tt.get("status") == "skipped":
            res["status"] = "skipped"
            res["reason"] = tt.get("reason")
            return res
        if meta.framework == "jax":
            res["xplane"] = keep_xplane(name, tt.get("trace"), out, copy_to)
        advice = tt.get("advice")
        res["profiler"] = ({"status": "n/a", "why": f"{meta.framework} program"}
                           if meta.framework not in ("torch", "jax") else
                           {"status": "ok" if advice else "error",
                            "error": tt.get("advice_error") or tt.get("error"),
                            **rr.condense_advice(advice)})
        if args.no_record:
            res["record"] = {"status": "not run (--no-record)"}
        else:
            rec = record(name, meta, args, out, tt.get("calibrations"))
            if (Path(rec["run"]) / "manifest.json").exists():  # a partial run is advised too
                rec.update(advise(Path(rec["run"]), out / "rec" / f"{name}.report.json",
                                  args.advise_timeout))
            rec["status"] = "ok" if "findings" in rec else "error"
            res["record"] = rec
        res["score"] = {
            "record": timing.score_first_serious(
                meta.expected, res["timing"], res["record"].get("findings")
                if res["record"].get("status") == "ok" else None),
            "profiler": None if res["profiler"]["status"] == "n/a" else
            timing.score_first_serious(meta.expected, res["timing"],
                                       res["profiler"].get("findings")
                                       if res["profiler"]["status"] == "ok" else None),
        }
        res["remedy_score"] = score_result(res)
        res["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - one scenario must not stop the suite
        res["status"] = "error"
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    finally:
        res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def meta_of(name: str) -> timing.ScenarioMeta:
    import importlib

    return timing.ScenarioMeta.of(importlib.import_module(name))


def expected_s(meta: timing.ScenarioMeta, args: argparse.Namespace | None = None) -> float:
    """A scenario's likely wall time on an H100 (for --budget); --program-timing adds its
    runs: the baseline and each fix variant (about 8 s of start-up and compilation each)."""
    extra = 0.0
    if args is not None and meta.name in getattr(args, "program_timing", ()):
        programs = 1 + len(variants.variants_of(importlib.import_module(meta.name)))
        extra = programs * args.program_rounds * (args.program_seconds_each + 8.0)
    return (35.0 if meta.step_hook else 45.0 + (meta.program_seconds or 0.0)) + extra


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--skip", default="", help="comma-separated scenario names to leave out")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds (8)")
    ap.add_argument("--steps", type=int, default=None, help="steps per timing block (auto)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per variant (5)")
    ap.add_argument("--inflight", type=int, default=2, help="torch steps in flight (2)")
    ap.add_argument("--timeout", type=float, default=150.0,
                    help="time limit of the timing/trace child, s (150)")
    ap.add_argument("--record-timeout", type=float, default=90.0,
                    help="time limit of a record, s, beyond the program's length (90)")
    ap.add_argument("--advise-timeout", type=float, default=180.0,
                    help="time limit of the advisor on a recorded run, s (180)")
    ap.add_argument("--program-seconds", type=float, default=None,
                    help="length of the programs without a step hook (default: each "
                         "scenario's, 14 s)")
    ap.add_argument("--program-timing", default="auto",
                    help="comma-separated scenarios whose measured savings are their "
                         "program's own loop: program.py's baseline and each fix variant in "
                         "alternating processes (the harness's in-process timing is kept as "
                         "timing_harness); auto (default): those the harness cannot time ("
                         + ", ".join(timing.TIMED_BY_PROGRAMS) + "); none: no scenario")
    ap.add_argument("--program-rounds", type=int, default=3,
                    help="rounds of --program-timing (3)")
    ap.add_argument("--program-seconds-each", type=float, default=5.0,
                    help="length of each --program-timing run, s (5)")
    ap.add_argument("--program-warmup-steps", type=int, default=0,
                    help="each --program-timing run's ms/step leaves out its first N steps (0)")
    ap.add_argument("--no-record", action="store_true", help="timing and torch.profiler only")
    ap.add_argument("--bundle-mb", type=float, default=14.0,
                    help="size limit of each bundle file before compression, MiB (14)")
    ap.add_argument("--bundle-parts", type=int, default=1,
                    help="bundle files at most: bundle.tar.gz, bundle-2.tar.gz, ... (1)")
    ap.add_argument("--copy-to", default=None, help="also copy results/table/bundle here")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no scenario that would likely end after this "
                         "(estimate: 35 s with a step hook, 60 s without); the rest are "
                         "listed as not run")
    ap.add_argument("--merge", default=None,
                    help="comma-separated suite folders: merge their results.json into --out")
    ap.add_argument("--advise", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--untraced-step-ms", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.advise and not args.out:
        ap.error("--out is required")
    names = [n for n in (args.only.split(",") if args.only else timing.SCENARIOS) if n]
    unknown = [n for n in names + args.skip.split(",") if n and n not in timing.SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}; known: "
                 f"{', '.join(timing.SCENARIOS)}")
    args.names = [n for n in names if n not in set(args.skip.split(","))]
    spec = {"auto": ",".join(timing.TIMED_BY_PROGRAMS), "none": ""}.get(args.program_timing,
                                                                        args.program_timing)
    args.program_timing = [n for n in spec.split(",") if n]
    unknown = [n for n in args.program_timing if n not in timing.SCENARIOS]
    if unknown:
        ap.error(f"--program-timing: unknown scenario(s): {', '.join(unknown)}")
    return args


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_limited, which ends its child group


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.advise:
        return advise_child(args.advise, args.json, args.untraced_step_ms)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    copy_to = Path(args.copy_to).resolve() if args.copy_to else None
    if args.merge:
        meta, results = rr.merge([Path(d) for d in args.merge.split(",") if d])
        rr.write_outputs(out, results, meta, copy_to)
        log((out / "accuracy.md").read_text())
        return 0
    if args.device is None:
        args.device = rr.default_device()
    meta = rr.suite_meta(args, sys.argv)
    log(f"record suite: {len(args.names)} scenario(s) on {meta.get('device_name', args.device)}"
        f" -> {out}")
    results: list[dict[str, Any]] = []
    t_suite = time.perf_counter()
    for i, name in enumerate(args.names, 1):
        log(f"[{i}/{len(args.names)}] {name}")
        elapsed = time.perf_counter() - t_suite
        m = meta_of(name)
        if args.budget is not None and elapsed + expected_s(m, args) > args.budget:
            res = {"scenario": name, "status": "skipped", "table": m.table,
                   "expected": m.expected, "framework": m.framework,
                   "reason": f"not run: --budget {args.budget:g} s ({elapsed:.0f} s used)"}
        else:
            res = run_scenario(name, args, out, copy_to)
        dest = out / "scenarios" / f"{name}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(res, indent=1, default=str))
        results.append(res)
        meta["suite_wall_s"] = round(time.perf_counter() - t_suite, 1)
        rr.write_outputs(out, results, meta, copy_to)  # partial results survive a kill
        log("    " + rr.summary_line(res))
    bundle = pack_bundle(out, results, args.bundle_mb, args.bundle_parts)
    meta["bundle"] = bundle
    rr.write_outputs(out, results, meta, copy_to)
    if copy_to:
        import shutil

        for part in bundle["parts"]:
            shutil.copy2(part, copy_to / Path(part).name)
    log(f"suite done in {meta['suite_wall_s']:.1f} s: {out / 'accuracy.md'}")
    log((out / "accuracy.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
