#!/usr/bin/env python3
"""The JAX scenarios of the planted suite through the XSpace importer (issue 23): each baseline
traced with ``jax.profiler.trace`` (steps marked with ``StepTraceAnnotation``), imported with
``stepscope import`` from the TensorBoard folder JAX writes, advised, and scored the way
``record_suite.py`` scores (``timing.score_first_serious``: the planted rule first among the
warning/critical findings, its estimate within +-30% of the saving measured untraced).

    PYTHONPATH=src:/tmp/site python3 benchmarks/scenarios/xspace_suite.py --out OUT \\
        [--only jax_eager,jax_jit] [--rounds R] [--steps M] [--trace-steps N] [--timeout S]

Writes OUT/xspace_suite.json, OUT/<scenario>/plugins/profile/<run>/<host>.xplane.pb (the
traced baseline), OUT/<scenario>.report.json (the advice) and prints one line per scenario.
Each scenario runs in its own child process (``--child NAME``) with a time limit; the child
never imports torch. Needs JAX with a CUDA GPU; protobuf for the import.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
for p in (str(HERE), str(REPO / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

# the planted suite's JAX scenarios (FRAMEWORK == "jax"; named here: importing the others
# would import torch)
JAX_SCENARIOS = ("jax_eager", "jax_jit")


def log(msg: str) -> None:
    print(msg, flush=True)


def trace_baseline(step: Any, folder: Path, n: int, warmup: int) -> Path:
    """``n`` baseline steps under ``jax.profiler.trace``, each in a StepTraceAnnotation; the
    steps are not synchronised one by one (as the timing's blocks), only at both ends."""
    import jax

    for _ in range(warmup):
        step()
    step.sync()
    with jax.profiler.trace(str(folder)):
        for i in range(n):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step()
        step.sync()
    found = sorted(folder.glob("plugins/profile/*/*.xplane.pb*"))
    if not found:
        raise RuntimeError(f"jax.profiler.trace wrote no .xplane.pb under {folder}")
    return found[-1]


def run_child(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import timing

    from stepscope.importers.traces import import_traces
    from stepscope.reporters.json_report import to_json
    from stepscope.reporters.report import build_report
    from stepscope.store.run import open_run

    mod = importlib.import_module(name)
    res: dict[str, Any] = {"scenario": name, "expected": mod.EXPECTED, "status": "error"}
    base = fixed = None
    t0 = time.perf_counter()
    try:
        try:
            base = timing.as_step(mod.build(False, "cuda"))
            fixed = timing.as_step(mod.build(True, "cuda"))
        except timing.SkipScenario as exc:
            res.update(status="skipped", reason=str(exc))
            return res
        res["info"] = {"baseline": base.info, "fixed": fixed.info}
        t = timing.time_plain(base, fixed, rounds=args.rounds, steps=args.steps, warmup=5,
                              log=log)
        res["timing"] = t.to_dict()
        xplane = trace_baseline(base, out / name, args.trace_steps, warmup=3)
        res["xplane"] = str(xplane.relative_to(out))
        run = import_traces([out / name], out / f"{name}.run", overwrite=True)
        report = json.loads(to_json(build_report(open_run(run))))
        (out / f"{name}.report.json").write_text(json.dumps(report, indent=1))
        res["frameworks"] = report["run"]["frameworks"]
        res["step_detection"] = report["run"]["step_detection"]
        res["score"] = timing.score_first_serious(mod.EXPECTED, res["timing"],
                                                  report["findings"])
        res["findings"] = [(f["id"], f["severity"], f["est_saving_pct"])
                           for f in report["findings"]]
        res["status"] = "scored"
    except Exception as exc:  # noqa: BLE001 - one scenario must not stop the suite
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    finally:
        for s in (base, fixed):
            if s is not None:
                s.close()
        res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def line(r: dict[str, Any]) -> str:
    s = r.get("score") or {}
    t = r.get("timing") or {}
    if r.get("status") != "scored":
        return f"{r['scenario']:<14} {r.get('status')}: {r.get('reason') or r.get('error')}"
    return (f"{r['scenario']:<14} expected {r['expected']:<16} top {s.get('top')!s:<16} "
            f"first={s.get('ranked_first')} est {s.get('est_saving_pct')}% vs measured "
            f"{t.get('saving_pct')}% (ratio {s.get('ratio_pct')}, ok={s.get('within_tolerance')})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--trace-steps", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        res = run_child(args.child, args, out)
        (out / f"{args.child}.result.json").write_text(json.dumps(res, indent=1, default=str))
        return 0
    names = [n for n in args.only.split(",") if n] or list(JAX_SCENARIOS)
    results = []
    for name in names:
        cmd = [sys.executable, __file__, "--out", str(out), "--child", name,
               "--rounds", str(args.rounds), "--trace-steps", str(args.trace_steps)]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        try:
            subprocess.run(cmd, timeout=args.timeout, check=False)
            res = json.loads((out / f"{name}.result.json").read_text())
        except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
            res = {"scenario": name, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
        results.append(res)
        log(line(res))
    (out / "xspace_suite.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
