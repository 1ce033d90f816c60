"""Which of stepscope's CUPTI settings cost the program what: one process, CUPTI attached the
whole time, short blocks under different kind sets in a shuffled order each round, so that
every setting is compared with the others under the same host conditions (the host's speed
drifts by seconds; docs/benchmarks.md). Switching kinds takes ~0.02 ms (cupti_states.py).

Variants:
  default     stepscope's default until 2026-11-25's fifth session: kernels, memcpy (+peer),
              memset, synchronization, NVTX markers, overhead, runtime+driver calls filtered
              through the activity kinds (domain on, ~1,200 calls off); ``lean`` is the default
              since
  kineto      what torch.profiler's CUDA activities enable (PyTorch 2.11's Kineto): kernels,
              memcpy, memset, overhead, every runtime call but cudaGetDevice, every driver call
              but cuKernelGetAttribute, cuDevicePrimaryCtxGetState, cuCtxGetCurrent
  nomarker    default without NVTX markers
  nosync      default without synchronization records
  noapi       default without runtime/driver call records
  allapi      default with every runtime/driver call recorded (no per-call switches)
  idle        CUPTI attached, every kind off
  serial      default with kernels recorded in CUPTI's serial mode (CUPTI_ACTIVITY_KIND_KERNEL,
              which runs kernels one at a time: never a default, it changes multi-stream
              programs) instead of the concurrent mode (which instruments the kernels' code)
  nokernel    default without kernel records
  only-kernel, only-copy, only-overhead, only-syncmarker, only-api, only-cbapi: one part of
              the default alone (kernels; memcpy, peer copies and memsets; CUPTI overhead
              records; synchronization and NVTX markers; the filtered runtime/driver calls, through
              the activity kinds or through callbacks)
  only-sync, only-marker: synchronization records alone, NVTX markers alone
  lean        kernels, copies, memsets, NVTX markers, overhead, and the kept calls through
              callbacks: stepscope's default since 2026-11-25's fifth session
  lean-sync   lean with synchronization records: cbapi's setting (the kinds enabled in another
              order)
  kernel-cbapi  kernels and the kept calls through callbacks only
  cbapi       default with the kept runtime/driver calls recorded through CUPTI's Callback API,
              switched on call by call (stepscope's ``api_via="callbacks"``), not its activity
              kinds

    python benchmarks/capture/cupti_kinds.py --out kinds.json --workload launch|gpt [--rounds 12]
        [--detach-each]

``--detach-each``: CUPTI starts cold for every block with only the variant's kinds, and is
detached (cuptiFinalize) after it, followed by a plain block: what having switched a kind on
leaves behind for the rest of the capture is then part of that variant's cost (with CUPTI
attached the whole time, it is shared by all). Ratios are then over the plain blocks next to it.

Per round, each variant's ms per step over the round's ``kineto`` block, and over its ``idle``
block; medians and quartiles over rounds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS, make_workload, settle, steps_for, sync, time_steps  # noqa: E402

VARIANTS = ("default", "kineto", "nomarker", "nosync", "noapi", "allapi", "idle", "serial",
            "nokernel", "cbapi", "only-kernel", "only-copy", "only-overhead", "only-syncmarker",
            "only-api", "only-cbapi", "only-sync", "only-marker", "lean", "lean-sync",
            "kernel-cbapi")
KERNEL_SERIAL = 3  # CUPTI_ACTIVITY_KIND_KERNEL
KINETO_OFF = {2: ("cudaGetDevice",), 1: ("cuKernelGetAttribute", "cuDevicePrimaryCtxGetState",
                                         "cuCtxGetCurrent")}  # domain -> calls switched off


def variant_plans(L: Any) -> dict[str, tuple[list[int], str | None]]:
    """Each variant's activity kinds, and how its runtime/driver calls are recorded: "filtered"
    (the activity kinds, every other call switched off), "kineto" (those kinds, Kineto's calls
    off), "all" (those kinds, every call), "callbacks" (CUPTI's Callback API, the kept calls), or
    None (no call records). ``lean-sync`` is ``cbapi``'s setting (kinds enabled in another order),
    kept under its name for the runs recorded with it."""
    full = [L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMCPY2, L.MEMSET, L.SYNCHRONIZATION, L.MARKER,
            L.OVERHEAD]

    def without(*kinds: int) -> list[int]:
        return [k for k in full if k not in kinds]

    lean = without(L.SYNCHRONIZATION)
    return {
        "default": (full, "filtered"),
        "kineto": ([L.CONCURRENT_KERNEL, L.MEMCPY, L.MEMSET, L.OVERHEAD], "kineto"),
        "nomarker": (without(L.MARKER), "filtered"),
        "nosync": (without(L.SYNCHRONIZATION), "filtered"),
        "noapi": (full, None),
        "allapi": (full, "all"),
        "idle": ([], None),
        "serial": ([KERNEL_SERIAL, *without(L.CONCURRENT_KERNEL)], "filtered"),
        "nokernel": (without(L.CONCURRENT_KERNEL), "filtered"),
        "cbapi": (full, "callbacks"),
        "only-kernel": ([L.CONCURRENT_KERNEL], None),
        "only-copy": ([L.MEMCPY, L.MEMCPY2, L.MEMSET], None),
        "only-overhead": ([L.OVERHEAD], None),
        "only-syncmarker": ([L.SYNCHRONIZATION, L.MARKER], None),
        "only-api": ([], "filtered"),
        "only-cbapi": ([], "callbacks"),
        "only-sync": ([L.SYNCHRONIZATION], None),
        "only-marker": ([L.MARKER], None),
        "lean": (lean, "callbacks"),
        "lean-sync": ([*lean, L.SYNCHRONIZATION], "callbacks"),
        "kernel-cbapi": ([L.CONCURRENT_KERNEL], "callbacks"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="kinds.json")
    ap.add_argument("--workload", choices=WORKLOADS, default="launch")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block-s", type=float, default=0.3)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--detach-each", action="store_true")
    args = ap.parse_args()
    from stepscope.capture.cupti import detach
    from stepscope.capture.cupti import layouts as L
    from stepscope.capture.cupti.api_callbacks import ApiCallbacks
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    step, _ = make_workload(args.workload, batch=args.gpt_batch)
    n = steps_for(step, args.block_s, 8)
    cap = CuptiCapture(GpuSettings(detach=False, api_via="activity"),
                       spill_dir=Path(tempfile.mkdtemp()) / "spill")
    lib = cap.lib
    api_fn = {L.DOMAIN_RUNTIME_API: lib.cuptiActivityEnableRuntimeApi,
              L.DOMAIN_DRIVER_API: lib.cuptiActivityEnableDriverApi}
    api_kind = {L.DOMAIN_RUNTIME_API: L.RUNTIME, L.DOMAIN_DRIVER_API: L.DRIVER}
    plans = variant_plans(L)
    enabled: list[int] = []
    callbacks: list[Any] = []  # the ApiCallbacks of a variant that records calls through them

    def off_calls(domain: int, api: str) -> list[int]:
        if api == "kineto":
            names = KINETO_OFF[domain]
            return [c for c, nm in cap.calls.names[domain].items()
                    if nm.split("_v")[0] in names]
        return cap.calls.plan(domain)[1] if api == "filtered" else []

    def set_variant(variant: str) -> None:
        for k in enabled:
            lib.cuptiActivityDisable(k)
        enabled.clear()
        for cb in callbacks:
            cb.stop()
            cb.unsubscribe()
        callbacks.clear()
        # enabling a domain's kind resets its per-call switches (all on): a clean start each time
        # (after a detach CUPTI starts clean anyway)
        for domain, kind in api_kind.items():
            if not args.detach_each:
                lib.cuptiActivityEnable(kind)
                lib.cuptiActivityDisable(kind)
        kinds, api = plans[variant]
        for k in kinds:
            if lib.cuptiActivityEnable(k) == 0:
                enabled.append(k)
        if api == "callbacks":
            cb = ApiCallbacks(lib, cap.shim)
            why = cb.start(cap.calls, list(api_kind))
            if why is not None:
                raise SystemExit(f"{variant}: {why}")
            callbacks.append(cb)
        elif api is not None:
            for domain, kind in api_kind.items():
                if lib.cuptiActivityEnable(kind) == 0:
                    enabled.append(kind)
                    for cbid in off_calls(domain, api):
                        api_fn[domain](cbid, 0)

    cap.start()  # buffers, callbacks, the spill; then each block sets its own kinds
    for k in cap._enabled:
        lib.cuptiActivityDisable(k)
    cap._enabled.clear()
    if args.detach_each:  # every block starts from a detached CUPTI
        cap.flush(forced=True)
        detach.arm(lib, cap.shim, cap.version)
        step()
        sync()
    for domain in api_kind:
        cap.calls.plan(domain)
    blocks: list[dict[str, Any]] = []
    switch_ms: list[float] = []
    rng = random.Random(0)

    def timed_block() -> float:
        settle()
        return time_steps(step, n)[0]

    def cold_start() -> None:
        detach.reset(lib, cap.shim)
        cap.shim.ss_configure(cap.settings.buffer_mb << 20, cap.settings.max_mb << 20)
        lib.cuptiActivityRegisterCallbacks(
            ctypes.cast(cap.shim.ss_buffer_requested, ctypes.c_void_p),
            ctypes.cast(cap.shim.ss_buffer_completed, ctypes.c_void_p))

    if args.detach_each:
        blocks.append({"round": -1, "variant": "plain", "ms": timed_block(), "records": 0})
    for r in range(args.rounds):
        order = list(args.variants)
        rng.shuffle(order)
        for variant in order:
            t0 = time.perf_counter()
            if args.detach_each:
                cold_start()
            set_variant(variant)
            switch_ms.append((time.perf_counter() - t0) * 1e3)
            kinds_on, via_callbacks = list(enabled), bool(callbacks)
            before = cap.records
            ms = timed_block()
            set_variant("idle")
            cap.flush(forced=True)
            blocks.append({"round": r, "variant": variant, "ms": ms,
                           "records": cap.records - before, "kinds": kinds_on,
                           "callbacks": via_callbacks})
            if args.detach_each:
                detach.arm(lib, cap.shim, cap.version)
                step()  # its first CUDA call detaches CUPTI
                sync()
                blocks.append({"round": r, "variant": "plain", "ms": timed_block(), "records": 0,
                               "detach": detach.state(cap.shim)})
    if not args.detach_each:
        cap.stop()
    summary: dict[str, Any] = {"steps_per_block": n, "rounds": args.rounds,
                               "detach_each": args.detach_each,
                               "switch_ms_median": round(statistics.median(switch_ms), 3)}
    if args.detach_each:  # each block over the mean of the plain blocks before and after it
        for v in args.variants:
            rs = [b["ms"] / statistics.mean((blocks[j - 1]["ms"], blocks[j + 1]["ms"]))
                  for j, b in enumerate(blocks) if b["variant"] == v and 0 < j < len(blocks) - 1]
            q = statistics.quantiles(rs, n=4) if len(rs) >= 2 else [rs[0]] * 3
            summary[f"{v} / plain"] = {"median": round(statistics.median(rs), 4),
                                       "iqr": [round(q[0], 4), round(q[2], 4)]}
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
    for v in [*args.variants, "plain"] if args.detach_each else args.variants:
        bs = [b for b in blocks if b["variant"] == v]
        summary[v] = {"median_ms": round(statistics.median(b["ms"] for b in bs), 3),
                      "records_per_step": round(statistics.median(b["records"] for b in bs) / n, 1)}
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"workload": args.workload, "summary": summary,
                                          "blocks": blocks}, indent=1))


if __name__ == "__main__":
    main()
