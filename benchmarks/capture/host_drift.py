"""How steady is the host, and does a capture leave the process slower after it ends? Time the same
uncaptured step in short blocks, phase after phase, each phase after one more short capture:

1. before any capture;
2. after a host-only stepscope capture (``backend="none"``);
3. after a GPU capture with CUPTI left attached (``STEPSCOPE_CUPTI_DETACH=0``, as stepscope did
   before it detached CUPTI);
4. after a GPU capture that detaches CUPTI (the default);
5. after a torch.profiler capture (CUDA activities; PyTorch tears CUPTI down on CUDA >= 12.6).

    python benchmarks/capture/host_drift.py --out drift.json [--workload launch|gpt] [--seconds 30]

Per block: wall ms per step, the CPU the main thread was on, and the steal and iowait ticks of
the whole machine during the block (/proc/stat).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import gpt_step, launch_step, sync  # noqa: E402


def _cpu() -> int:
    return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])


def _ticks() -> tuple[int, int]:
    f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return int(f[4]), int(f[7]) if len(f) > 7 else 0  # iowait, steal


def _detach_state() -> str:
    from stepscope.capture.cupti import detach
    from stepscope.capture.cupti.native import load_shim

    try:
        return detach.state(load_shim())
    except Exception as exc:  # no shim here: the state is unknown, not an error of the run
        return f"unknown ({exc!r})"


def blocks(step: Any, seconds: float, n: int, phase: str) -> list[dict[str, Any]]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        io0, st0 = _ticks()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        ms = (time.perf_counter() - t0) / n * 1e3
        io1, st1 = _ticks()
        out.append({"phase": phase, "t": round(time.monotonic(), 3), "ms": round(ms, 4),
                    "cpu": _cpu(), "steal": st1 - st0, "iowait": io1 - io0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="drift.json")
    ap.add_argument("--workload", default="launch", choices=("launch", "gpt"))
    ap.add_argument("--seconds", type=float, default=30.0, help="per phase")
    ap.add_argument("--block-steps", type=int, default=20)
    ap.add_argument("--gpt-batch", type=int, default=0)
    args = ap.parse_args()
    import stepscope

    step = launch_step() if args.workload == "launch" else gpt_step(25.0, args.gpt_batch)[0]
    for _ in range(10):
        step()
    sync()
    rows = blocks(step, args.seconds, args.block_steps, "before any capture")
    tmp = Path(tempfile.mkdtemp(prefix="ss-drift-"))
    detach_states = {}
    for i, (phase, backend, keep_attached) in enumerate([
            ("after a host-only capture", "none", False),
            ("after a GPU capture, CUPTI left attached", "auto", True),
            ("after a GPU capture, CUPTI detached", "auto", False)]):
        os.environ["STEPSCOPE_CUPTI_DETACH"] = "0" if keep_attached else "1"
        with stepscope.record(tmp / f"r{i}", steps="2-21", hooks=False, backend=backend) as r:
            for _ in range(23):
                step()
                r.step()
        rows += blocks(step, args.seconds, args.block_steps, phase)
        detach_states[phase] = _detach_state()
    import torch

    if torch.cuda.is_available():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            for _ in range(20):
                step()
            sync()
        rows += blocks(step, args.seconds, args.block_steps, "after a torch.profiler capture")
    summary: dict[str, Any] = {"detach_state_after_phase": detach_states}
    for phase in dict.fromkeys(str(r["phase"]) for r in rows):
        ms = [r["ms"] for r in rows if r["phase"] == phase]
        adj = [abs(b / a - 1) for a, b in zip(ms, ms[1:])]
        summary[phase] = {"blocks": len(ms), "median_ms": round(statistics.median(ms), 3),
                          "min_ms": min(ms), "max_ms": max(ms),
                          "adjacent_change_median": round(statistics.median(adj), 4),
                          "cpus": sorted({r["cpu"] for r in rows if r["phase"] == phase}),
                          "steal_ticks": sum(r["steal"] for r in rows if r["phase"] == phase)}
        print(phase, summary[phase], flush=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "blocks": rows}, indent=1))


if __name__ == "__main__":
    main()
