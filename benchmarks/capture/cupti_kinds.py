"""Which of stepscope's CUPTI settings cost the program what: one process, CUPTI attached the
whole time, short blocks under different kind sets in a shuffled order each round, so that
every setting is compared with the others under the same host conditions (the host's speed
drifts by seconds; docs/benchmarks.md). Switching kinds takes ~0.02 ms (cupti_states.py).

Variants:
  default     stepscope's default: kernels, memcpy (+peer), memset, synchronization, NVTX
              markers, overhead, runtime+driver calls filtered (domain on, ~1,200 calls off)
  kineto      what torch.profiler's CUDA activities enable (PyTorch 2.11's Kineto): kernels,
              memcpy, memset, overhead, every runtime call but cudaGetDevice, every driver call
              but cuKernelGetAttribute, cuDevicePrimaryCtxGetState, cuCtxGetCurrent
  nomarker    default without NVTX markers
  nosync      default without synchronization records
  noapi       default without runtime/driver call records
  allapi      default with every runtime/driver call recorded (no per-call switches)
  idle        CUPTI attached, every kind off

    python benchmarks/capture/cupti_kinds.py --out kinds.json --workload launch|gpt [--rounds 12]

Per round, each variant's ms per step over the round's ``kineto`` block, and over its ``idle``
block; medians and quartiles over rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import gpt_step, launch_step, settle, sync  # noqa: E402

VARIANTS = ("default", "kineto", "nomarker", "nosync", "noapi", "allapi", "idle")
KINETO_OFF = {2: ("cudaGetDevice",), 1: ("cuKernelGetAttribute", "cuDevicePrimaryCtxGetState",
                                         "cuCtxGetCurrent")}  # domain -> calls switched off


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="kinds.json")
    ap.add_argument("--workload", choices=("gpt", "launch"), default="launch")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block-s", type=float, default=0.3)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = ap.parse_args()
    from stepscope.capture.cupti import layouts as L
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    step: Callable[[], None]
    step, _ = gpt_step(25.0, args.gpt_batch) if args.workload == "gpt" else (launch_step(), 0)
    for _ in range(5):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(10):
        step()
    sync()
    n = max(8, round(args.block_s / ((time.perf_counter() - t0) / 10)))
    cap = CuptiCapture(GpuSettings(detach=False), spill_dir=Path(tempfile.mkdtemp()) / "spill")
    lib = cap.lib
    base = [L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMCPY2, L.MEMSET, L.SYNCHRONIZATION, L.MARKER,
            L.OVERHEAD]
    api_fn = {L.DOMAIN_RUNTIME_API: lib.cuptiActivityEnableRuntimeApi,
              L.DOMAIN_DRIVER_API: lib.cuptiActivityEnableDriverApi}
    api_kind = {L.DOMAIN_RUNTIME_API: L.RUNTIME, L.DOMAIN_DRIVER_API: L.DRIVER}
    enabled: list[int] = []

    def off_calls(domain: int, variant: str) -> list[int]:
        if variant == "kineto":
            names = KINETO_OFF[domain]
            return [c for c, nm in cap.calls.names[domain].items()
                    if nm.split("_v")[0] in names]
        return cap.calls.plan(domain)[1] if variant in ("default", "nomarker", "nosync") else []

    def set_variant(variant: str) -> None:
        for k in enabled:
            lib.cuptiActivityDisable(k)
        enabled.clear()
        # enabling a domain's kind resets its per-call switches (all on): a clean start each time
        for domain, kind in api_kind.items():
            lib.cuptiActivityEnable(kind)
            lib.cuptiActivityDisable(kind)
        if variant == "idle":
            return
        kinds = [L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMSET, L.OVERHEAD] if variant == "kineto" else [
            k for k in base if not (variant == "nomarker" and k == L.MARKER)
            and not (variant == "nosync" and k == L.SYNCHRONIZATION)]
        for k in kinds:
            if lib.cuptiActivityEnable(k) == 0:
                enabled.append(k)
        if variant != "noapi":
            for domain, kind in api_kind.items():
                if lib.cuptiActivityEnable(kind) == 0:
                    enabled.append(kind)
                    for cbid in off_calls(domain, variant):
                        api_fn[domain](cbid, 0)

    cap.start()  # buffers, callbacks, the spill; then each block sets its own kinds
    for k in cap._enabled:
        lib.cuptiActivityDisable(k)
    cap._enabled.clear()
    for domain in api_kind:
        cap.calls.plan(domain)
    blocks: list[dict[str, Any]] = []
    switch_ms: list[float] = []
    rng = random.Random(0)
    for r in range(args.rounds):
        order = list(args.variants)
        rng.shuffle(order)
        for variant in order:
            t0 = time.perf_counter()
            set_variant(variant)
            switch_ms.append((time.perf_counter() - t0) * 1e3)
            settle()
            before = cap.records
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            sync()
            ms = (time.perf_counter() - t0) / n * 1e3
            set_variant("idle")
            cap.flush(forced=True)
            blocks.append({"round": r, "variant": variant, "ms": ms,
                           "records": cap.records - before})
    cap.stop()
    summary: dict[str, Any] = {"steps_per_block": n, "rounds": args.rounds,
                               "switch_ms_median": round(statistics.median(switch_ms), 3)}
    for ref in ("kineto", "idle"):
        if ref not in args.variants:
            continue
        for v in args.variants:
            rs = []
            for r in range(args.rounds):
                mine = [b["ms"] for b in blocks if b["round"] == r and b["variant"] == v]
                theirs = [b["ms"] for b in blocks if b["round"] == r and b["variant"] == ref]
                if mine and theirs:
                    rs.append(mine[0] / theirs[0])
            q = statistics.quantiles(rs, n=4) if len(rs) >= 2 else [rs[0]] * 3
            summary[f"{v} / {ref}"] = {"median": round(statistics.median(rs), 4),
                                       "iqr": [round(q[0], 4), round(q[2], 4)]}
    for v in args.variants:
        bs = [b for b in blocks if b["variant"] == v]
        summary[v] = {"median_ms": round(statistics.median(b["ms"] for b in bs), 3),
                      "records_per_step": round(statistics.median(b["records"] for b in bs) / n, 1)}
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"workload": args.workload, "summary": summary,
                                          "blocks": blocks}, indent=1))


if __name__ == "__main__":
    main()
