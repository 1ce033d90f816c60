"""Does the program run slower right after a capture has ended, and for how long?

In one process, rounds of: 1 s of plain steps timed in short sub-blocks, one capture (as in
``overhead.py``'s ``captured_block``), then 3 s of plain steps in sub-blocks. Per configuration,
the median over rounds of each sub-block's ms per step over the median of the sub-blocks before
the capture: a profile of the slowdown in time after the capture's end. What is still running
in the process is listed after each capture (threads, child processes).

Configurations: ``stepscope`` (the session: CUPTI capture, host samplers, merge when the
``with`` block ends), ``stepscope-bare`` (the CUPTI capture alone, no merge), ``burst`` (the bare
capture, then a CPU burst on every core as long as the last stepscope capture's start, stop and
merge took (its time outside the timed steps): a DuckDB query; is a burst of work on all cores
enough to slow the next steps?), ``none`` (no capture).

    python benchmarks/capture/after_capture.py --out after.json [--workload launch] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS, captured_block, make_workload, settle, steps_for, time_steps  # noqa: E402

CONFIGS = ("stepscope", "stepscope-bare", "burst", "none")


def burst(seconds: float) -> None:
    """Work on every core for about ``seconds`` (DuckDB's threads, as a merge's would be)."""
    import duckdb

    con = duckdb.connect()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        con.execute("SELECT sum(hash(i)) FROM range(50000000) t(i)").fetchall()
    con.close()


def children() -> list[str]:
    try:
        import psutil

        return [p.name() for p in psutil.Process().children(recursive=True)]
    except Exception:  # psutil missing or a child gone: not the point here
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="after.json")
    ap.add_argument("--workload", choices=WORKLOADS, default="launch")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--window-s", type=float, default=1.5, help="the captured block")
    ap.add_argument("--sub-s", type=float, default=0.1, help="one timed sub-block")
    ap.add_argument("--before-s", type=float, default=1.0)
    ap.add_argument("--after-s", type=float, default=3.0)
    ap.add_argument("--gpt-batch", type=int, default=0)
    args = ap.parse_args()
    step, batch = make_workload(args.workload, 25.0, args.gpt_batch)
    steps = steps_for(step, args.window_s, 10)
    sub = steps_for(step, args.sub_s, 2)
    n_before = max(3, round(args.before_s / args.sub_s))
    n_after = max(3, round(args.after_s / args.sub_s))
    tmp = Path(tempfile.mkdtemp(prefix="ss-after-"))
    merge_s = 1.0  # stepscope's start, stop and merge: its time outside the timed steps
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        k = i % len(args.configs)
        for config in args.configs[k:] + args.configs[:k]:
            settle()
            before = [time_steps(step, sub)[0] for _ in range(n_before)]
            t0 = time.perf_counter()
            if config != "none":
                cap = "stepscope-bare" if config == "burst" else config
                captured_block(cap, step, steps, tmp / f"{config}-{i}")
            t1 = time.perf_counter()
            if config == "burst":
                burst(merge_s)
            t2 = time.perf_counter()
            left = {"threads": [t.name for t in threading.enumerate()], "children": children()}
            settle()
            after = [time_steps(step, sub)[0] for _ in range(n_after)]
            base = statistics.median(before)
            if config == "stepscope":  # the block's end: its last step, then the merge
                merge_s = max(0.2, t1 - t0 - steps * base / 1e3)
            rounds.append({"config": config, "round": i, "before_ms": before, "after_ms": after,
                           "capture_and_exit_s": round(t1 - t0, 3), "burst_s": round(t2 - t1, 3),
                           "left": left, "profile": [round(x / base, 4) for x in after]})
    summary: dict[str, Any] = {}
    for config in args.configs:
        rs = [r for r in rounds if r["config"] == config]
        profile = [round(statistics.median(r["profile"][j] for r in rs), 4) for j in range(n_after)]
        summary[config] = {"rounds": len(rs), "profile": profile,
                           "first_second": round(statistics.median(
                               x for r in rs for x in r["profile"][:round(1 / args.sub_s)]), 4),
                           "last_second": round(statistics.median(
                               x for r in rs for x in r["profile"][-round(1 / args.sub_s):]), 4)}
        print(f"{config:15s} first s {summary[config]['first_second']:.3f}  last s "
              f"{summary[config]['last_second']:.3f}  profile {profile}", flush=True)
    Path(args.out).write_text(json.dumps({"workload": args.workload, "batch": batch,
                                          "steps_per_capture": steps, "steps_per_sub_block": sub,
                                          "sub_s": args.sub_s, "summary": summary,
                                          "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
