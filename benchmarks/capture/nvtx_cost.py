"""What NVTX injection costs an NVTX-heavy program, outside and inside stepscope's window.

`stepscope record` sets ``NVTX_INJECTION64_PATH`` (libcupti) for the whole program so that NVTX
ranges can be recorded; outside the capture window the injected library is loaded but records
nothing. Workloads (each in a fresh process):

  torch   ``torch.cuda.nvtx.range_push``/``range_pop`` pairs in a loop: ns per pair
  jax     a jitted bf16 MLP step (XLA emits one NVTX range per thunk, ~30 per step) under
          ``jax.profiler.StepTraceAnnotation``: steps per second

Modes, run interleaved R times:

  plain      python WORKLOAD
  inject     NVTX_INJECTION64_PATH=libcupti python WORKLOAD (no stepscope)
  idle       stepscope record --steps 1000000-1000001 -- python WORKLOAD (window never opens)
  window     stepscope record --delay 0 --duration 600 -- python WORKLOAD (captured throughout)
  idle-nogpu, idle-nosamplers, idle-nohooks   idle with --backend none / without samplers /
             with the step hooks off (--nvtx naming a range that never occurs)

    python benchmarks/capture/nvtx_cost.py --out nvtx_cost.json [--reps 2] [--workloads torch jax]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("plain", "inject", "idle", "window")
# more modes (--modes): what the idle cost is made of
EXTRA = {"idle-nogpu": ["--backend", "none"], "idle-nosamplers": ["--no-stacks", "--sample-hz", "0.1"],
         "idle-nohooks": ["--nvtx", "no-such-range"]}


def child_torch(seconds: float) -> dict[str, Any]:
    import torch

    torch.cuda.init()
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    for _ in range(10_000):
        push("warm")
        pop()
    n, blocks = 20_000, []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            push("step-part")
            pop()
        blocks.append((time.perf_counter_ns() - t0) / n)
    return {"ns_per_pair": statistics.median(blocks), "blocks": len(blocks)}


def child_jax(seconds: float) -> dict[str, Any]:
    import jax
    from jax_train import make_train  # this folder is on sys.path when run as a script

    step, ws, x = make_train(width=1024, batch=256)

    i = 0

    def block(k: int) -> float:
        nonlocal ws, i
        t0 = time.perf_counter()
        val = None
        for _ in range(k):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                ws, val = step(ws, x)
            i += 1
        jax.block_until_ready(val)
        return k / (time.perf_counter() - t0)

    block(50)
    rates = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        rates.append(block(200))
    return {"steps_per_s": statistics.median(rates), "blocks": len(rates)}


def run_case(workload: str, mode: str, seconds: float, lib: str, tmp: Path) -> dict[str, Any]:
    child = [sys.executable, __file__, "--child", workload, "--seconds", str(seconds)]
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    if mode == "inject":
        env["NVTX_INJECTION64_PATH"] = lib
        cmd = child
    elif mode == "plain":
        cmd = child
    else:
        window = (["--delay", "0", "--duration", "600"] if mode == "window"
                  else ["--steps", "1000000-1000001", *EXTRA.get(mode, [])])
        cmd = [sys.executable, "-m", "stepscope", "record", "--quiet", "--force", "-o",
               str(tmp / f"{workload}-{mode}"), *window, "--", *child]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": proc.stderr.strip().splitlines()[-3:], "rc": proc.returncode}
    return json.loads(line[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="nvtx_cost.json")
    ap.add_argument("--workloads", nargs="+", default=["torch", "jax"])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=[*MODES, *EXTRA])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = child_torch if args.child == "torch" else child_jax
        print("RESULT " + json.dumps(fn(args.seconds)), flush=True)
        return
    from stepscope.capture.cupti.native import find_libcupti

    lib = find_libcupti()
    if lib is None:
        raise SystemExit("nvtx_cost: no libcupti found")
    tmp = Path(tempfile.mkdtemp(prefix="ss-nvtx-"))
    results: list[dict[str, Any]] = []
    for w in args.workloads:
        for rep in range(args.reps):
            order = args.modes if rep % 2 == 0 else list(reversed(args.modes))
            for m in order:
                res = {"workload": w, "mode": m, "rep": rep,
                       **run_case(w, m, args.seconds, lib, tmp)}
                results.append(res)
                print(json.dumps(res), flush=True)
    summary: dict[str, dict[str, float]] = {}
    for w in args.workloads:
        key = "ns_per_pair" if w == "torch" else "steps_per_s"
        for m in args.modes:
            vals = [r[key] for r in results if r["workload"] == w and r["mode"] == m and key in r]
            if vals:
                summary.setdefault(w, {})[m] = statistics.median(vals)
    out = {"libcupti": lib, "summary": summary, "results": results}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("SUMMARY " + json.dumps(summary))


if __name__ == "__main__":
    main()
