#!/usr/bin/env python3
"""Does torch.profiler slow the host it traces, or was the host slow at that moment? The
untraced baseline timed just before and just after its torch.profiler trace, in one process,
in fresh processes one after the other.

    PYTHONPATH=src:/tmp/site python3 benchmarks/scenarios/trace_bracket.py --out OUT.json \
        [--only launch_bound,torch_inference] [--repeats 3] [--blocks 6]

Per scenario and process: ``pre`` and ``post`` (``--blocks`` blocks of untraced baseline steps
each, ~150 ms a block, after a warm-up), the trace in between (``common.trace``: the suite's
schedule, CPU+CUDA, profile_memory) and, read back from it, the median ``ProfilerStep`` length
and the median kernel-launch call. The suite (``record_suite.py``) times the baseline only
before its trace; when ``pre`` and ``post`` agree while the traced step per untraced step
varies from process to process, the profiler's cost itself varies (what
``model.profiler_cost.host_scale`` estimates from the launch calls); when ``post`` moves with
the traced step, the host's speed moved and the suite's measurement is off from its trace.
No stepscope analysis runs here.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent.parent / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)


def trace_facts(path: Path) -> dict[str, float]:
    """Median ProfilerStep length (ms) and median kernel-launch call (us) of a Chrome trace."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = [e["dur"] for e in events if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep")]
    launches = [e["dur"] for e in events if e.get("cat") == "cuda_runtime"
                and e.get("name") in ("cudaLaunchKernel", "cudaLaunchKernelExC")]
    return {"traced_ms": statistics.median(steps) / 1e3 if steps else float("nan"),
            "launch_us": statistics.median(launches) if launches else float("nan")}


def child(name: str, blocks: int, device: str) -> dict[str, Any]:
    import common
    import timing

    mod = importlib.import_module(name)
    step = timing.as_step(mod.build(False, device))
    runner = common.make_runner(step, device)
    timing.block(runner, 10)
    steps = timing.steps_per_block(timing.block(runner, 2))
    pre = [timing.block(runner, steps) for _ in range(blocks)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.pt.trace.json.gz"
        t0 = time.perf_counter()
        common.trace(step, path, device)
        trace_s = time.perf_counter() - t0
        facts = trace_facts(path)
    post = [timing.block(runner, steps) for _ in range(blocks)]
    step.close()
    return {"scenario": name, "steps_per_block": steps, "pre_ms": pre, "post_ms": post,
            "pre_median_ms": statistics.median(pre), "post_median_ms": statistics.median(post),
            "trace_s": round(trace_s, 2), **facts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file for every process's result")
    ap.add_argument("--only", default="launch_bound,torch_inference")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per scenario")
    ap.add_argument("--blocks", type=int, default=6, help="timed blocks before and after")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.blocks, args.device)), flush=True)
        return 0
    if not args.out:
        ap.error("--out is required")
    results: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for name in [n for n in args.only.split(",") if n]:
            proc = subprocess.run([sys.executable, __file__, "--child", name,
                                   "--blocks", str(args.blocks), "--device", args.device],
                                  capture_output=True, text=True, timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            res = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
                "scenario": name, "error": proc.stderr[-2000:]}
            res["repeat"] = r
            results.append(res)
            if "error" not in res:
                print(f"{name} #{r}: pre {res['pre_median_ms']:.3f} ms, traced "
                      f"{res['traced_ms']:.3f} ms (launch {res['launch_us']:.2f} us), post "
                      f"{res['post_median_ms']:.3f} ms", flush=True)
            else:
                print(f"{name} #{r}: error {res['error'][-300:]}", flush=True)
            Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
