"""stepscope configurations side by side in ONE process, interleaved with plain blocks.

``benchmarks/overhead.py`` runs each configuration in its own process; on hosts whose speed
jumps between levels for seconds (docs/benchmarks.md) the processes' ratios then differ by the
host as much as by the configuration. Here one process runs, round after round, for each
configuration (its order rotating): a plain block, then a captured block. stepscope detaches
CUPTI after each capture (docs/record.md), so each captured block starts cold and the plain
blocks run without CUPTI. The ratio of a captured block is its ms per step over the mean of the
plain blocks just before and just after it. Per configuration: the median of those ratios, and
their quartiles.

torch.profiler is mixed in only with ``--torch-teardown``: by default PyTorch 2.11 keeps a CUPTI
subscriber after its first capture, so stepscope can no longer detach CUPTI in that process (its
``cupti_stays_attached`` diagnostic; measured on the H100 2026-11-25), and every later plain
block would run with CUPTI attached. ``--torch-teardown`` sets Kineto's ``TEARDOWN_CUPTI=1``
before torch is imported: Kineto then detaches CUPTI after each of its captures, as stepscope
does, and initialises it again at the next. Whether that held is in the output: stepscope's
diagnostics per block (``cupti_stays_attached`` would say a subscriber was left), and the
plain blocks after each configuration's captures (``plain_after``). Without it, compare with
torch.profiler through overhead.py with ``--rounds 1`` (one plain block, then one captured
block, per process).

    python benchmarks/capture/mixed.py --out mixed.json --workload launch \\
        [--configs stepscope stepscope-kernels ...] [--rounds 10] [--window-s 1.5] [--gpt-batch 8]
        [--time-limit-s S]
        [--torch-teardown --configs stepscope torch-cuda ...]

Several workloads in one process (``--workload rnn launch conv``): each is built once, then run
in turn, all its rounds before the next; ``--time-limit-s`` is then the budget of the whole run,
shared equally (a workload starts no new round past its share; what one leaves unused goes to
the next). The output holds one entry per workload, and a table of every workload's median
ratios is printed at the end. Issue 17's measurement (under 5 minutes on an H100; torch.profiler's
own stop takes 5-15 s per block on the launch-heavy steps, which bounds the rounds):

    python benchmarks/capture/mixed.py --out o17.json --workload rnn launch conv --rounds 12 \\
        --window-s 0.8 --time-limit-s 230 --torch-teardown --configs stepscope torch-cuda

and what 2026-11-26's capture changes are worth, stepscope's CUPTI capture alone (no session, no
merge: about 1 s per block, so many more rounds), against the same with them undone:

    python benchmarks/capture/mixed.py --out ab.json --workload rnn launch --rounds 20 \\
        --window-s 0.8 --time-limit-s 170 --configs stepscope-bare stepscope-bare-before

Knobbed configurations (``KNOBBED``): ``stepscope-nested`` is ``stepscope`` with the driver calls
made inside runtime calls written too (``STEPSCOPE_CUPTI_NESTED_DRIVER=1``);
``stepscope-before`` and ``stepscope-bare-before`` also let CUPTI zero its buffers itself and make
none ahead (``STEPSCOPE_CUPTI_ZEROED_BUFFERS=0``, ``STEPSCOPE_CUPTI_PREPARED_BUFFERS=0``): the
capture as it was before 2026-11-26.

A capture's own start and stop (and stepscope's merge) are outside the timing, as in
overhead.py. Host instructions retired by the main thread are counted per block where the
kernel lets a process read its own hardware counters (perf_event_open; frequency- and
neighbour-independent), else left out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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

# a configuration of overhead.py run with environment knobs set for its block only (read when
# the block's capture is made)
BEFORE_2026_11_26 = {"STEPSCOPE_CUPTI_NESTED_DRIVER": "1", "STEPSCOPE_CUPTI_ZEROED_BUFFERS": "0",
                     "STEPSCOPE_CUPTI_PREPARED_BUFFERS": "0"}
KNOBBED = {"stepscope-nested": ("stepscope", {"STEPSCOPE_CUPTI_NESTED_DRIVER": "1"}),
           "stepscope-before": ("stepscope", BEFORE_2026_11_26),
           "stepscope-bare-before": ("stepscope-bare", BEFORE_2026_11_26)}
MIXABLE = (*(c for c in CONFIGS if c not in PROCESS_WIDE), *KNOBBED)  # torch: --torch-teardown


class Instructions:
    """The calling thread's retired instructions (user and kernel), through perf_event_open."""

    def __init__(self) -> None:
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            attr = (ctypes.c_uint8 * 128)()
            ctypes.memmove(attr, (ctypes.c_uint32 * 2)(0, 128), 8)  # type PERF_TYPE_HARDWARE, size
            ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 1)(1), 8)  # INSTRUCTIONS
            nr = 298 if os.uname().machine == "x86_64" else 241
            fd = libc.syscall(nr, attr, 0, -1, -1, 0)  # this thread, any CPU
            self.fd = int(fd)
        except OSError:
            self.fd = -1

    def read(self) -> int | None:
        if self.fd < 0:
            return None
        return int.from_bytes(os.read(self.fd, 8), "little")


def knobbed_block(config: str, step: Callable[[], None], steps: int, run: Path
                  ) -> tuple[float, list[float]]:
    """``captured_block``, with a ``KNOBBED`` configuration's environment set around it."""
    base, env = KNOBBED.get(config, (config, {}))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return captured_block(base, step, steps, run)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_workload(workload: str, step: Callable[[], None], batch: int, args: argparse.Namespace,
                 tmp: Path, counter: Instructions, budget_s: float) -> dict[str, Any]:
    """Rounds of (captured block, plain block) per configuration on one workload, the first
    plain block before them; no new round once ``budget_s`` (0: none) has passed."""
    steps = steps_for(step, args.window_s, 10)
    blocks: list[dict[str, Any]] = []

    def plain() -> None:
        settle()
        i0 = counter.read()
        ms, _ = time_steps(step, steps)
        i1 = counter.read()
        blocks.append({"kind": "plain", "ms": ms, "t": time.time(),
                       "minstr": None if i0 is None or i1 is None else (i1 - i0) / steps / 1e6})

    t_start = time.monotonic()
    plain()
    rounds_run = 0
    for i in range(args.rounds):
        if budget_s and time.monotonic() - t_start > budget_s:
            break
        rounds_run += 1
        k = i % len(args.configs)
        for config in args.configs[k:] + args.configs[:k]:
            run = tmp / f"{workload}-{config}-{i}"
            i0 = counter.read()
            ms, marks = knobbed_block(config, step, steps, run)
            i1 = counter.read()  # includes the capture's start and stop: kept for reference only
            manifest = run / "manifest.json"
            diags = ([d.get("code") for d in json.loads(manifest.read_text()).get("diagnostics", [])]
                     if manifest.exists() else None)
            blocks.append({"kind": config, "ms": ms, "t": time.time(), "marks": marks,
                           "diagnostics": diags, "gpu": _gpu_settings(manifest),
                           "minstr_with_start_stop": None if i0 is None or i1 is None
                           else (i1 - i0) / steps / 1e6})
            plain()
    summary: dict[str, Any] = {}
    for config in args.configs:
        ratios = []
        for j, b in enumerate(blocks):
            if b["kind"] == config and 0 < j < len(blocks) - 1:
                around = (blocks[j - 1]["ms"] + blocks[j + 1]["ms"]) / 2
                ratios.append(b["ms"] / around)
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        summary[config] = {"median_ratio": round(statistics.median(ratios), 4),
                           "quartiles": [round(q[0], 4), round(q[2], 4)], "pairs": len(ratios),
                           "ratios": [round(x, 4) for x in ratios]}
        print(f"{workload:7s} {config:18s} median {summary[config]['median_ratio']:.3f} "
              f"IQR {summary[config]['quartiles']} ({len(ratios)})", flush=True)
    # did a configuration leave something behind that slows the program?
    for config, got in summary.items():
        after = [blocks[j + 1]["ms"] / blocks[j - 1]["ms"] for j, b in enumerate(blocks)
                 if b["kind"] == config and 0 < j < len(blocks) - 1]
        got["plain_after_over_before_median"] = (
            round(statistics.median(after), 4) if after else None)
    plain_ms = [b["ms"] for b in blocks if b["kind"] == "plain"]
    changes = [abs(b / a - 1) for a, b in zip(plain_ms, plain_ms[1:])]
    return {"workload": workload, "batch": batch, "steps_per_block": steps,
            "rounds": rounds_run, "seconds": round(time.monotonic() - t_start, 1),
            "plain_median_ms": statistics.median(plain_ms),
            "plain_adjacent_change_median": statistics.median(changes) if changes else None,
            "summary": summary, "blocks": blocks}


def _gpu_settings(manifest: Path) -> dict[str, Any] | None:
    """What the block's GPU capture wrote, from a stepscope run's manifest: records, the calls
    written and the nested driver calls left out, who zeroed the buffers, CUPTI's own overhead
    records (its time asking for buffers among them)."""
    if not manifest.exists():
        return None
    ranks = json.loads(manifest.read_text()).get("settings", {}).get("ranks", {})
    gpu = (next(iter(ranks.values()), None) or {}).get("gpu") or {}
    keys = ("records", "api_records_written", "api_nested_driver_calls",
            "api_nested_other_correlation", "api_records_lost", "buffers_zeroed_by",
            "cupti_overhead_ns")
    return {k: gpu.get(k) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="mixed.json")
    ap.add_argument("--workload", nargs="+", choices=WORKLOADS, default=["launch"])
    ap.add_argument("--configs", nargs="+", default=["stepscope", "stepscope-kernels"], choices=MIXABLE)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--window-s", type=float, default=1.5)
    ap.add_argument("--target-ms", type=float, default=25.0)
    ap.add_argument("--gpt-batch", type=int, default=0)
    ap.add_argument("--time-limit-s", type=float, default=0.0,
                    help="start no new round after this many seconds, over all workloads (0: no "
                         "limit)")
    ap.add_argument("--torch-teardown", action="store_true",
                    help="mix torch.profiler in: Kineto told to detach CUPTI after each capture")
    args = ap.parse_args()
    if any(c.startswith("torch-") for c in args.configs):
        if not args.torch_teardown:
            ap.error("torch.profiler configurations need --torch-teardown (see the docs)")
        if "torch" in sys.modules:
            ap.error("torch was imported before TEARDOWN_CUPTI could be set")
        os.environ["TEARDOWN_CUPTI"] = "1"
    t0 = time.monotonic()
    built = [(w, *make_workload(w, args.target_ms, args.gpt_batch if w.startswith("gpt") else 0))
             for w in args.workload]
    tmp = Path(tempfile.mkdtemp(prefix="ss-mixed-"))
    counter = Instructions()
    results = []
    for n, (w, step, batch) in enumerate(built):
        budget = 0.0
        if args.time_limit_s:  # an equal share of what is left
            budget = max(0.0, (args.time_limit_s - (time.monotonic() - t0)) / (len(built) - n))
        results.append(run_workload(w, step, batch, args, tmp, counter, budget))
        out: dict[str, Any] = results[0] if len(results) == 1 else {"workloads": results}
        Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\n{'workload':9s} {'plain ms':>9s} " + " ".join(f"{c:>18s}" for c in args.configs))
    for r in results:
        cells = [f"{r['summary'][c]['median_ratio']:18.3f}" if c in r["summary"] else f"{'-':>18s}"
                 for c in args.configs]
        print(f"{r['workload']:9s} {r['plain_median_ms']:9.2f} " + " ".join(cells)
              + f"   ({r['rounds']} rounds, {r['seconds']:.0f} s)")
    print(f"total {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
