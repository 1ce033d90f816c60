#!/usr/bin/env python3
"""Planted-bottleneck suite: time each scenario's baseline and fixed variants interleaved,
trace the baseline with torch.profiler, run stepscope's import + analyze + advise on the trace,
and score the advisor (ranked first? estimate within +-30% of the measured saving?).

    PYTHONPATH=src:/tmp/site python3 benchmarks/scenarios/run.py --out OUT [--only a,b]
        [--rounds R] [--steps M] [--device cuda|cpu] [--inflight N] [--timeout S]

Writes OUT/results.json, OUT/accuracy.md, OUT/traces.tar.gz (every baseline trace, to re-run
the advisor offline), OUT/traces/*.pt.trace.json.gz, OUT/runs/<scenario>/ (stepscope runs) and
OUT/scenarios/<scenario>.json (one result per scenario, written as soon as it is known).

Each scenario runs in its own child process (``--child NAME``) with a time limit, so a hang, a
CUDA error or leftover global state (TF32 flags, allocator) cannot spoil the next one;
``--in-process`` runs them all in this process instead. JAX and CuPy scenarios
(``FRAMEWORK`` != "torch") are timed only: their child never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
for p in (str(HERE), str(REPO / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

from timing import SCENARIOS  # the registry (after the sys.path setup)


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# One scenario (in the child process)


def run_scenario(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from timing import ScenarioMeta

    t0 = time.perf_counter()
    res: dict[str, Any] = {"scenario": name, "device": args.device, "status": "error"}
    mod = importlib.import_module(name)
    meta = ScenarioMeta.of(mod)
    res["expected"] = meta.expected
    res["description"] = meta.description
    res["framework"] = meta.framework
    if meta.framework != "torch":
        return run_timed_only(mod, args, res, t0, out)

    import common
    import torch

    base = None
    fixes: dict[str, Any] = {}
    try:
        try:
            base, fixes = build_variants(mod, args.device, res)
        except common.SkipScenario as exc:
            res.update(status="skipped", reason=str(exc))
            return res
        res["build_s"] = round(time.perf_counter() - t0, 3)
        runners = {"baseline": common.make_runner(base, args.device, args.inflight)}
        runners.update({n: common.make_runner(s, args.device, args.inflight)
                        for n, s in fixes.items()})
        measure_variants(runners, args, res)
        _close(res, tuple(fixes.values()), t0)
        fixes = {}
        trace_path = out / "traces" / f"{name}.pt.trace.json.gz"
        res["trace"] = common.trace(base, trace_path, args.device, inflight=args.inflight)
        log(f"    trace: {trace_path.name} ({res['trace']['bytes'] / 1e6:.1f} MB, "
            f"{res['trace']['wall_s']:.1f} s)")
        if args.device.startswith("cuda"):
            res["max_memory_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        base.close()
        base = None
        common.free_memory(args.device)
        res["status"] = "measured"
        if args.no_advise:
            res["score"] = common.score(res["expected"], res["timing"], None)
        else:
            try:
                res["advice"] = common.advise_trace(trace_path, out / "runs" / name)
                res["status"] = "ok"
            except Exception as exc:  # noqa: BLE001 - stepscope problem: keep the measurement
                res["advice_error"] = f"{type(exc).__name__}: {exc}"
                res["advice_traceback"] = traceback.format_exc()
                log(f"    stepscope failed: {res['advice_error']}")
            res["score"] = common.score(res["expected"], res["timing"], res.get("advice"))
    except Exception as exc:  # noqa: BLE001 - one scenario must not stop the suite
        _failed(res, exc)
    finally:
        _close(res, (base, *fixes.values()), t0)
    return res


def build_variants(mod: Any, device: str, res: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The baseline and every fix variant of ``mod`` built (``variants.variants_of``, default
    first). A variant that cannot be built here (SkipScenario) or fails is noted in
    ``res["variants"]`` and left out; the scenario is skipped (SkipScenario raised) when no
    variant could be built or the baseline cannot."""
    import timing
    import variants

    declared = variants.variants_of(mod)
    base = timing.as_step(mod.build(False, device))
    res["variants"] = {v.name: v.to_dict() for v in declared}
    fixes: dict[str, Any] = {}
    skipped: list[str] = []
    for v in declared:
        try:
            fixes[v.name] = timing.as_step(mod.build(variants.build_arg(mod, v.name), device))
        except timing.SkipScenario as exc:
            res["variants"][v.name]["status"] = f"skipped: {exc}"
            skipped.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - the other variants are still measured
            res["variants"][v.name]["status"] = "error"
            res["variants"][v.name]["error"] = f"{type(exc).__name__}: {exc}"
            log(f"    variant {v.name} failed to build: {type(exc).__name__}: {exc}")
    if not fixes:
        base.close()
        raise timing.SkipScenario(skipped[0] if skipped else "no fix variant could be built")
    res["info"] = {"baseline": base.info, "fixed": next(iter(fixes.values())).info,
                   "variants": {n: s.info for n, s in fixes.items()}}
    common = sys.modules.get("common")  # torch scenarios only (JAX/CuPy never import it)
    if common is not None:
        res["calibrations"] = common.calibrations()
    return base, fixes


def measure_variants(runners: dict[str, Any], args: argparse.Namespace,
                     res: dict[str, Any]) -> None:
    """Baseline and every built variant timed interleaved (``timing.time_many``):
    ``res["timing"]`` is the baseline against the default (first built) variant, as before;
    ``res["variants"][name]`` gains each variant's measured step and saving."""
    import timing

    mt = timing.time_many(runners, rounds=args.rounds, steps=args.steps, warmup=args.warmup,
                          log=log)
    names = [n for n in runners if n != "baseline"]
    res["timing"] = mt.pair(names[0]).to_dict()
    res["timing"]["fixed_variant"] = names[0]
    res["variants_timing"] = mt.to_dict()
    for n in names:
        res["variants"][n].update(status="measured", **mt.variant_dict(n))


def _failed(res: dict[str, Any], exc: Exception) -> None:
    """One scenario's error, kept in its result (the suite goes on)."""
    res["error"] = f"{type(exc).__name__}: {exc}"
    res["traceback"] = traceback.format_exc()
    log(f"    ERROR: {res['error']}")


def _close(res: dict[str, Any], steps: tuple[Any, ...], t0: float) -> None:
    """Free what the scenario's builds made (loader workers...) and note its wall time."""
    for s in steps:
        if s is not None:
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001
                log(f"    close failed: {exc}")
    res["wall_s"] = round(time.perf_counter() - t0, 3)


def _jax_profiler_leg(base: Any, res: dict[str, Any], args: argparse.Namespace,
                      out: Path) -> None:
    """The JAX baseline traced with jax.profiler (XSpace), imported and advised: the JAX
    scenarios' counterpart of the torch.profiler trace."""
    from jaxtrace import trace_jax
    from trace_advice import advise_trace

    name = res["scenario"]
    try:
        res["trace"] = trace_jax(base, out / "traces" / f"{name}.jax")
        log(f"    jax.profiler trace: {res['trace']['bytes'] / 1e6:.1f} MB, "
            f"{res['trace']['wall_s']:.1f} s")
        res["advice"] = advise_trace(Path(res["trace"]["path"]), out / "runs" / name)
        res["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - keep the measurement
        res["advice_error"] = f"{type(exc).__name__}: {exc}"
        res["advice_traceback"] = traceback.format_exc()
        log(f"    jax.profiler leg failed: {res['advice_error']}")


def run_timed_only(mod: Any, args: argparse.Namespace, res: dict[str, Any],
                   t0: float, out: Path | None = None) -> dict[str, Any]:
    """A JAX or CuPy scenario: build and time both variants (torch.profiler does not apply, and
    this process never imports torch); a JAX baseline is then traced with jax.profiler and its
    XSpace file advised (``_jax_profiler_leg``)."""
    import timing

    base = None
    fixes: dict[str, Any] = {}
    try:
        try:
            base, fixes = build_variants(mod, args.device, res)
        except timing.SkipScenario as exc:
            res.update(status="skipped", reason=str(exc))
            return res
        res["build_s"] = round(time.perf_counter() - t0, 3)
        runners = {"baseline": timing.PlainRunner(base)}
        runners.update({n: timing.PlainRunner(s) for n, s in fixes.items()})
        measure_variants(runners, args, res)
        res["trace"] = None
        res["status"] = "measured"
        if res["framework"] == "jax" and not args.no_advise and out is not None:
            _jax_profiler_leg(base, res, args, out)
        res["score"] = timing.score(res["expected"], res["timing"], res.get("advice"))
    except Exception as exc:  # noqa: BLE001 - one scenario must not stop the suite
        _failed(res, exc)
    finally:
        _close(res, (base, *fixes.values()), t0)
    return res


def child_main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    name = args.child
    res = run_scenario(name, args, out)
    dest = out / "scenarios" / f"{name}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(res, indent=1, default=str))
    return 0


# ---------------------------------------------------------------------------------------------
# Report


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def accuracy_md(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Planted-bottleneck suite: advisor accuracy",
        "",
        (f"Device: {meta.get('device_name', meta['device'])}; torch {meta.get('torch')}; "
         f"{meta['date']}; rounds {meta['rounds']} x steps {meta['steps'] or 'auto'}; "
         f"in-flight bound {meta['inflight']}."),
        ("Measured = median over blocks of the per-block mean step time, baseline and fixed "
         "interleaved in one process (untraced). Estimate = the advisor's est_saving for the "
         "planted rule on the traced baseline (torch.profiler CPU+CUDA, profile_memory). "
         "est/measured compares percentages of the step (ms ratio in brackets); "
         "ok = within ±30%."),
        *([f"Scoring: {meta['rescored']}."] if meta.get("rescored") else []),
        "",
        ("| scenario | planted rule | top finding | est. saving ms / % | measured saving ms / % | "
         "est/measured | ranked first? | baseline / fixed ms (traced) |"),
        "|---|---|---|---|---|---|---|---|",
    ]
    healthy_line = ""
    for r in results:
        name = r["scenario"]
        exp = r.get("expected", "")
        if r.get("status") == "skipped":
            lines.append(f"| {name} | {exp or '(healthy)'} | skipped: {r.get('reason', '')} "
                         "| | | | | |")
            continue
        if r.get("status") == "error" and "timing" not in r:
            err = str(r.get("error", "?")).replace("|", "\\|")[:120]
            lines.append(f"| {name} | {exp or '(healthy)'} | ERROR: {err} | | | | | |")
            continue
        t = r.get("timing", {})
        s = r.get("score", {})
        adv = r.get("advice") or {}
        findings = adv.get("findings", [])
        top = findings[0] if findings else None
        top_s = (f"{top['id']} ({top['severity']})" if top
                 else ("stepscope error" if r.get("advice_error")
                       else f"not traced ({r['framework']})" if r.get("framework", "torch")
                       != "torch" else "none"))
        measured = f"{_f(t.get('saving_ms'))} / {_f(t.get('saving_pct'), 1)}%"
        traced = (adv.get("traced") or {}).get("step_mean_ms")
        times = f"{_f(t.get('baseline_ms'))} / {_f(t.get('fixed_ms'))} ({_f(traced)})"
        if not exp:
            lines.append(f"| {name} | (healthy) | {top_s} | – | {measured} | – | "
                         f"{'pass' if s.get('passed') else 'FAIL'}: {s.get('warn_crit', '?')} "
                         f"warning/critical | {times} |")
            healthy_line = (f"Healthy run: {s.get('warn_crit', '?')} warning/critical finding(s) "
                            f"({len(findings)} in all).")
            continue
        est = (f"{_f(s.get('est_saving_ms'))} / {_f(s.get('est_saving_pct'), 1)}%"
               if s.get("est_saving_ms") is not None else "not found")
        ratio = s.get("ratio_pct")
        ratio_s = (f"{_f(ratio)} ({_f(s.get('ratio_ms'))}) {'ok' if s.get('within_tolerance') else 'off'}"
                   if ratio is not None else "–")
        rank = s.get("expected_rank")
        first = "yes" if rank == 1 else (f"no (rank {rank})" if rank else "no (absent)")
        lines.append(f"| {name} | {exp} | {top_s} | {est} | {measured} | {ratio_s} | {first} "
                     f"| {times} |")
    scored = [r for r in results if r.get("expected") and r.get("score")]
    n_first = sum(1 for r in scored if r["score"].get("ranked_first"))
    n_tol = sum(1 for r in scored if r["score"].get("within_tolerance"))
    lines += ["", (f"Ranked first: {n_first}/{len(scored)}; estimate within ±30%: "
                   f"{n_tol}/{len(scored)}."), ""]
    if healthy_line:
        lines += [healthy_line, ""]
    errs = [r for r in results if r.get("error") or r.get("advice_error")]
    if errs:
        lines += ["## Errors", ""]
        for r in errs:
            lines.append(f"- {r['scenario']}: {r.get('error') or r.get('advice_error')}")
        lines.append("")
    lines += ["## All findings per scenario", ""]
    for r in results:
        fs = (r.get("advice") or {}).get("findings", [])
        if not fs:
            continue
        lines.append(f"- **{r['scenario']}**: " + "; ".join(
            f"{f['id']} {f['severity']} {f['est_saving_ms']:.2f} ms ({f['est_saving_pct']:.1f}%)"
            for f in fs))
    lines.append("")
    return "\n".join(lines)


def write_outputs(out: Path, results: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps({"meta": meta, "scenarios": results}, indent=1,
                                                 default=str))
    (out / "accuracy.md").write_text(accuracy_md(results, meta))


def pack_traces(out: Path) -> Path | None:
    traces = sorted((out / "traces").glob("*.json.gz")) if (out / "traces").is_dir() else []
    if not traces:
        return None
    dest = out / "traces.tar.gz"
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        for t in traces:
            tar.add(t, arcname=f"traces/{t.name}")
    return dest


def device_meta(device: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch

        meta["torch"] = torch.__version__
        if device.startswith("cuda") and torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            meta.update(device_name=p.name, sms=p.multi_processor_count,
                        memory_gb=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda)
    except Exception as exc:  # noqa: BLE001
        meta["torch_error"] = str(exc)
    try:
        import cupy

        meta["cupy"] = cupy.__version__
    except Exception:  # noqa: BLE001
        meta["cupy"] = None
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--skip", default="", help="comma-separated scenario names to leave out")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per block (default: auto, ~150 ms blocks, 3..50)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps per variant")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--inflight", type=int, default=2,
                    help="max steps queued on the GPU ahead of the host (0: unbounded)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="per-scenario time limit in seconds (child process)")
    ap.add_argument("--in-process", action="store_true", help="no child processes")
    ap.add_argument("--no-advise", action="store_true", help="time and trace only")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device is None:
        try:
            import torch

            args.device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            args.device = "cpu"
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.out = str(out)
    if args.child:
        return child_main(args)

    names = [n for n in (args.only.split(",") if args.only else SCENARIOS) if n]
    skip = {n for n in args.skip.split(",") if n}
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    names = [n for n in names if n not in skip]
    meta = {"device": args.device, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
            "inflight": args.inflight, "scenarios": names,
            "trace_schedule": "wait=1, warmup=3, active=5, repeat=1",
            **device_meta(args.device)}
    log(f"suite: {len(names)} scenario(s) on {meta.get('device_name', args.device)} "
        f"(torch {meta.get('torch')}, cupy {meta.get('cupy')}) -> {out}")
    results: list[dict[str, Any]] = []
    t_suite = time.perf_counter()
    for i, name in enumerate(names, 1):
        log(f"[{i}/{len(names)}] {name}")
        t0 = time.perf_counter()
        if args.in_process:
            res = run_scenario(name, args, out)
        else:
            res = run_child(name, args, out)
        res.setdefault("wall_s", round(time.perf_counter() - t0, 3))
        results.append(res)
        log(f"    {summary_line(res)}  [{time.perf_counter() - t0:.1f} s]")
        write_outputs(out, results, meta)  # partial results survive a kill
    meta["suite_wall_s"] = round(time.perf_counter() - t_suite, 1)
    write_outputs(out, results, meta)
    tar = pack_traces(out)
    log(f"suite done in {meta['suite_wall_s']:.1f} s: {out / 'accuracy.md'}"
        + (f", {tar}" if tar else ""))
    print((out / "accuracy.md").read_text(), flush=True)
    return 0


def run_child(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), "--child", name,
           "--out", str(out), "--rounds", str(args.rounds), "--warmup", str(args.warmup),
           "--device", args.device, "--inflight", str(args.inflight)]
    if args.steps is not None:
        cmd += ["--steps", str(args.steps)]
    if args.no_advise:
        cmd.append("--no-advise")
    dest = out / "scenarios" / f"{name}.json"
    if dest.exists():
        dest.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.run(cmd, timeout=args.timeout, env=env, check=False)
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if dest.exists():
        res: dict[str, Any] = json.loads(dest.read_text())
        if rc != 0:
            res["child_rc"] = rc
        return res
    expected = ""
    try:
        expected = getattr(importlib.import_module(name), "EXPECTED", "")
    except Exception as exc:  # noqa: BLE001
        log(f"    cannot import {name}: {exc}")
    return {"scenario": name, "expected": expected, "status": "error",
            "error": (f"timed out after {args.timeout:.0f} s" if rc == "timeout"
                      else f"child exited with {rc} and wrote no result")}


def summary_line(r: dict[str, Any]) -> str:
    st = r.get("status")
    if st == "skipped":
        return f"skipped: {r.get('reason')}"
    if "timing" not in r:
        return f"ERROR: {r.get('error')}"
    t, s = r["timing"], r.get("score") or {}
    fs = (r.get("advice") or {}).get("findings", [])
    top = (f"{fs[0]['id']} {fs[0]['est_saving_ms']:.2f} ms" if fs
           else ("stepscope error" if r.get("advice_error") else "no findings"))
    exp = r.get("expected") or "(healthy)"
    verdict = ("PASS" if s.get("passed") else "FAIL") if s else "?"
    return (f"{verdict} expected {exp}; top {top}; measured {t['baseline_ms']:.2f} -> "
            f"{t['fixed_ms']:.2f} ms ({t['saving_pct']:.1f}%); "
            f"est/measured {_f(s.get('ratio_pct'))}")


if __name__ == "__main__":
    sys.exit(main())
