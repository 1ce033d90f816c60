#!/usr/bin/env python3
"""How fast ``loader_tf32``'s loader delivers batches on its own, by worker count.

    python benchmarks/scenarios/loader_probe.py [--batches N] [--workers 0,1,2,4,6,8,12]
        [--batch-sizes 32] [--pin both|on|off] [--sample-ms 0.25]

No model, no GPU work: each configuration's ``DataLoader`` (the scenario's dataset, batch and
transform) is iterated for ``--batches`` batches after a warm-up, and the line gives the ms
between batches the training process receives, the ms a batch takes to make where it is made
(summed ``__getitem__`` time of its samples, measured in the process that made it), and with
``pin_memory`` the same with batches pinned. It tells whether a worker makes a batch as fast as
the training process does (the ``dataloader_workers`` remedy's assumption) and what the pinning
thread adds. Prints JSON lines; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import calibrate  # noqa: E402
from dataloader_bound import Tokens, _transform  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


class Timed(Tokens):
    """The scenario's samples, each with the ns its ``__getitem__`` took where it ran."""

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        t0 = time.perf_counter_ns()
        x = super().__getitem__(i)
        return x, torch.tensor(time.perf_counter_ns() - t0, dtype=torch.int64)


def probe(ds: Timed, batch: int, workers: int, pin: bool, n: int, warm: int) -> dict[str, Any]:
    kw: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": 2} if workers else {}
    loader = DataLoader(ds, batch_size=batch, num_workers=workers, pin_memory=pin, **kw)
    it = iter(loader)
    gaps: list[float] = []
    make: list[float] = []
    for k in range(warm + n):
        t0 = time.perf_counter()
        _, ns = next(it)
        if k >= warm:
            gaps.append((time.perf_counter() - t0) * 1e3)
            make.append(float(ns.sum()) / 1e6)
    wall = sum(gaps)
    del it, loader
    return {"workers": workers, "pin_memory": pin, "batches": n,
            "ms_between_batches": round(wall / n, 3),
            "gap_median_ms": round(statistics.median(gaps), 3),
            "make_batch_ms_median": round(statistics.median(make), 3),
            "make_batch_ms_mean": round(statistics.fmean(make), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--workers", default="0,1,2,4,6,8,12")
    ap.add_argument("--batch-sizes", default="32", help="samples per batch (256 KiB each)")
    ap.add_argument("--sample-ms", type=float, default=0.25,
                    help="transform time per sample (small: the hand-over alone sets the pace)")
    ap.add_argument("--pin", choices=("both", "on", "off"), default="both")
    args = ap.parse_args()
    seq, feat, sample_ms = 64, 1024, args.sample_ms
    base = np.random.default_rng(0).standard_normal((seq, feat), dtype=np.float32)
    rounds = calibrate(f"loader_tf32:{seq}x{feat}", lambda k: _transform(base, k), sample_ms)
    cuda = torch.cuda.is_available()
    print(json.dumps({"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                      "rounds": rounds, "sample_ms": sample_ms, "cuda": cuda}), flush=True)
    ds = Timed(seq, feat, rounds)
    pins = {"both": (False, True), "on": (True,), "off": (False,)}[args.pin] if cuda else (False,)
    for batch in (int(v) for v in args.batch_sizes.split(",")):
        for w in (int(v) for v in args.workers.split(",")):
            for pin in pins:
                row = probe(ds, batch, w, pin, args.batches, args.warmup)
                print(json.dumps({"batch": batch, "batch_mib": batch * seq * feat * 4 / 2**20,
                                  **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
