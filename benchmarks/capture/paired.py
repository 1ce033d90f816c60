"""stepscope against torch.profiler, paired inside each process: one figure per process whose
host-speed level cancels out.

``overhead.py --rounds 1`` gives one first pair per process (a plain block, then a captured
block) and compares the two profilers across processes; on the GPU machines used, the single
process's ratio moves by ±15% with the host (docs/benchmarks.md), more than the difference
looked for. Here each process runs a *plan*, a sequence of configurations, each captured block
right after a plain block of its own:

    plain, capture(A), plain, capture(B)

and the process's figure is ``d = (B / plain before B) / (A / plain before A)``: how much more B
costs than A on the same process and host. torch.profiler can only come last in a plan
(PyTorch 2.11 keeps a CUPTI subscriber after its capture: any later block would run with
CUPTI attached); stepscope detaches CUPTI after its capture, so the plain block after it runs
without CUPTI (``overhead.py``'s docs). The second capture of a process may differ from the first
for reasons of its own (CUPTI starts again after a detach, memory pools are warm): a control
plan ``stepscope,stepscope`` measures that order effect, and the plans alternate across
processes. The order-corrected figure is ``median d(stepscope,torch-cuda) / median
d(stepscope,stepscope)``.

Tests: per plan, a sign test (exact binomial) and a sign-flip permutation test of the mean
log d; between two plans, a two-sample permutation test of the log d (both two-sided, 20,000
random relabellings, seed 0). Every block's ms per step, every process's figures and the tests
go to ``--out``.

    python benchmarks/capture/paired.py --out paired.json --workload launch --processes 24 \\
        [--plans stepscope,torch-cuda stepscope,stepscope] [--window-s 1.5] [--gpt-batch 8]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import (  # noqa: E402
    CONFIGS,
    PROCESS_WIDE,
    WORKLOADS,
    captured_block,
    make_workload,
    settle,
    steps_for,
    time_steps,
)

DRAWS = 20_000


def parse_plan(text: str) -> list[str]:
    """``"stepscope,torch-cuda"`` -> its configurations, checked: known, and torch.profiler last."""
    plan = [c.strip() for c in text.split(",") if c.strip()]
    if len(plan) < 2:
        raise ValueError(f"plan {text!r}: name two configurations or more")
    for i, c in enumerate(plan):
        if c not in CONFIGS:
            raise ValueError(f"plan {text!r}: unknown configuration {c!r}")
        if c.startswith("torch-") and i != len(plan) - 1:
            raise ValueError(f"plan {text!r}: torch.profiler leaves CUPTI attached, so it can "
                             "only come last")
        if c in PROCESS_WIDE:
            raise ValueError(f"plan {text!r}: {c} changes the whole process; not for plans")
    return plan


def run_plan(workload: str, plan: list[str], window_s: float, target_ms: float,
             batch: int) -> dict[str, Any]:
    """One process's blocks: for each configuration, a plain block then its captured block."""
    step, batch = make_workload(workload, target_ms, batch)
    steps = steps_for(step, window_s, 10)
    tmp = Path(tempfile.mkdtemp(prefix="ss-paired-"))
    blocks: list[dict[str, Any]] = []
    for i, config in enumerate(plan):
        settle()
        plain_ms, _ = time_steps(step, steps)
        ms, _ = captured_block(config, step, steps, tmp / f"b{i}")
        blocks.append({"config": config, "plain_ms": plain_ms, "captured_ms": ms,
                       "ratio": ms / plain_ms})
    return {"workload": workload, "plan": plan, "batch": batch, "steps_per_block": steps,
            "blocks": blocks, "d": blocks[-1]["ratio"] / blocks[0]["ratio"]}


def sign_test(xs: list[float]) -> float:
    """Two-sided exact binomial p of as many values above 1 as seen (ties dropped)."""
    n = sum(1 for x in xs if x != 1.0)
    k = sum(1 for x in xs if x > 1.0)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, j) for j in range(min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def sign_flip_p(logs: list[float], rng: random.Random) -> float:
    """Two-sided p of the mean log ratio under random signs (is it told apart from 0?)."""
    if not logs:
        return 1.0
    seen = abs(statistics.fmean(logs))
    hits = sum(1 for _ in range(DRAWS)
               if abs(statistics.fmean(x if rng.random() < 0.5 else -x for x in logs)) >= seen - 1e-12)
    return (hits + 1) / (DRAWS + 1)


def two_sample_p(a: list[float], b: list[float], rng: random.Random) -> float:
    """Two-sided p of the difference of the means of a and b under random relabelling."""
    if not a or not b:
        return 1.0
    seen = abs(statistics.fmean(a) - statistics.fmean(b))
    pool = a + b
    hits = 0
    for _ in range(DRAWS):
        rng.shuffle(pool)
        if abs(statistics.fmean(pool[:len(a)]) - statistics.fmean(pool[len(a):])) >= seen - 1e-12:
            hits += 1
    return (hits + 1) / (DRAWS + 1)


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    rng = random.Random(0)
    by_plan: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        if "d" in r:
            by_plan.setdefault(",".join(r["plan"]), []).append(r)
    out: dict[str, Any] = {}
    for name, done in by_plan.items():
        ds = [r["d"] for r in done]
        logs = [math.log(x) for x in ds]
        firsts = [r["blocks"][0]["ratio"] for r in done]
        lasts = [r["blocks"][-1]["ratio"] for r in done]
        out[name] = {"processes": len(done), "median_d": round(statistics.median(ds), 4),
                     "d_quartiles": [round(q, 4) for q in statistics.quantiles(ds, n=4)]
                     if len(ds) >= 2 else None,
                     "d_above_1": sum(1 for x in ds if x > 1), "sign_test_p": round(sign_test(ds), 4),
                     "geo_mean_d": round(math.exp(statistics.fmean(logs)), 4),
                     "sign_flip_p": round(sign_flip_p(logs, rng), 4),
                     "median_first_ratio": round(statistics.median(firsts), 4),
                     "median_last_ratio": round(statistics.median(lasts), 4),
                     "d": [round(x, 4) for x in ds]}
    names = list(out)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            la = [math.log(x) for x in out[a]["d"]]
            lb = [math.log(x) for x in out[b]["d"]]
            out[f"{a} vs {b}"] = {
                "median_d_ratio": round(out[a]["median_d"] / out[b]["median_d"], 4),
                "geo_mean_d_ratio": round(out[a]["geo_mean_d"] / out[b]["geo_mean_d"], 4),
                "permutation_p": round(two_sample_p(la, lb, rng), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="paired.json")
    ap.add_argument("--workload", choices=WORKLOADS, default="launch")
    ap.add_argument("--plans", nargs="+", default=["stepscope,torch-cuda", "stepscope,stepscope"],
                    help="comma-separated configurations; processes cycle through the plans")
    ap.add_argument("--processes", type=int, default=12, help="processes in all")
    ap.add_argument("--window-s", type=float, default=1.5)
    ap.add_argument("--target-ms", type=float, default=25.0)
    ap.add_argument("--gpt-batch", type=int, default=0)
    ap.add_argument("--time-limit-s", type=float, default=0.0,
                    help="start no new process after this many seconds (0: no limit)")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        plans = [parse_plan(p) for p in ([args.one] if args.one else args.plans)]
    except ValueError as e:
        ap.error(str(e))
    if args.one:
        res = run_plan(args.workload, plans[0], args.window_s, args.target_ms, args.gpt_batch)
        print("RESULT " + json.dumps(res))
        return
    if args.workload.startswith("gpt") and not args.gpt_batch:
        ap.error("give --gpt-batch: every process must run the same step")
    t_start = time.time()
    results: list[dict[str, Any]] = []
    for p in range(args.processes):
        if args.time_limit_s and time.time() - t_start > args.time_limit_s:
            print(f"time limit: {p} processes run", flush=True)
            break
        plan = plans[p % len(plans)]
        cmd = [sys.executable, __file__, "--one", ",".join(plan), "--workload", args.workload,
               "--window-s", str(args.window_s), "--target-ms", str(args.target_ms),
               "--gpt-batch", str(args.gpt_batch)]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        res: dict[str, Any] = json.loads(line[7:]) if line else {
            "plan": plan, "error": (proc.stderr.strip().splitlines() or ["?"])[-3:]}
        res["process"] = p
        res["process_s"] = round(time.time() - t0, 1)
        results.append(res)
        if "d" in res:
            text = "  ".join(f"{b['config']} {b['ratio']:.3f} (plain {b['plain_ms']:.2f} ms)"
                             for b in res["blocks"])
            print(f"p{p:<3d} {text}  d {res['d']:.3f}", flush=True)
        else:
            print(f"p{p:<3d} {','.join(plan)} error {res['error']}", flush=True)
        Path(args.out).write_text(json.dumps({"results": results}, indent=1))
    summary = summarize(results)
    for name, s in summary.items():
        print(f"{name}: {json.dumps(s)}", flush=True)
    Path(args.out).write_text(json.dumps({"workload": args.workload, "summary": summary,
                                          "results": results}, indent=1))


if __name__ == "__main__":
    main()
