"""Are the runtime/driver call records taken through CUPTI's callbacks the records CUPTI's
activity kinds give, and does every GPU record still have its call? One process, captures
alternating between ways of recording the calls (stepscope's CUPTI capture alone, decoded at
stop), on a workload; per capture: kernels and how many of them have their launch call (same
correlation id), the same for copies and memsets, calls per step by name, the threads and
processes the calls name, the median duration of each call, the median time from a launch
call's start to its kernel's start, and what the shim wrote (records, driver calls left out
because they ran inside a recorded runtime call, and of those the ones whose correlation id was
not their runtime call's).

Ways (``--via``): ``callbacks`` (the default: the kept calls through CUPTI's callbacks, a driver
call inside a recorded runtime call not written), ``callbacks-nested`` (the same, those driver
calls written too, as before 2026-11-26: decode drops them), ``activity`` (CUPTI's activity
kinds). Workloads: those of overhead.py (PyTorch: runtime launches, and cuBLASLt's driver
launches) and ``cupy`` (no PyTorch in the process: every kept driver call recorded; CuPy
launches through the driver, copies through the runtime). Ends with exit status 1 when a
capture of ``callbacks`` has a kernel, copy or memset without its call, or recorded nothing.

    python benchmarks/capture/api_records_check.py --out check.json --workload launch|rnn|gpt|cupy
        [--rounds 3] [--steps 20] [--via callbacks callbacks-nested activity]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS  # noqa: E402

VIAS = ("callbacks", "callbacks-nested", "activity")


def cupy_workload() -> tuple[Callable[[], None], Callable[[], None]]:
    """cupy_loop.py's loop body (a matmul, elementwise kernels, a raw kernel, a pageable
    host-to-device copy, a device-to-host read), and a device sync; PyTorch is not imported."""
    import cupy as cp
    import numpy as np

    scale = cp.RawKernel(r"""
    extern "C" __global__ void scale(float* x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }
    """, "scale")
    a = cp.random.standard_normal((1024, 1024), dtype=cp.float32)
    host = np.ones((1 << 18,), dtype=np.float32)

    def step() -> None:
        for _ in range(10):
            b = a @ a
            b = cp.tanh(b) * 0.5 + 1.0
            scale(((b.size + 255) // 256,), (256,), (b, cp.float32(0.99), cp.int32(b.size)))
            d = cp.asarray(host)
            float(cp.sum(d) + b[0, 0])

    return step, cp.cuda.Device().synchronize


def summarise(tables: dict[str, Any], steps: int) -> dict[str, Any]:
    k = tables.get("kernels", {})
    a = tables.get("api_calls", {})
    kc = [int(c) for c in k.get("correlation", [])]
    names = list(a.get("name", []))
    by_corr: dict[int, int] = {}
    for c, t in zip(a.get("correlation", []), a.get("ts_ns", [])):
        by_corr.setdefault(int(c), int(t))
    linked = [c for c in kc if c in by_corr]
    lat = [int(ks) - by_corr[int(c)] for c, ks in zip(kc, k.get("ts_ns", [])) if int(c) in by_corr]
    durs: dict[str, list[int]] = {}
    for n, d in zip(names, a.get("dur_ns", [])):
        durs.setdefault(n, []).append(int(d))
    other = {}
    for t in ("memcpy", "memset"):
        cs = [int(c) for c in tables.get(t, {}).get("correlation", [])]
        other[f"{t}_per_step"] = round(len(cs) / steps, 2)
        other[f"{t}_with_call"] = (round(sum(c in by_corr for c in cs) / len(cs), 4)
                                   if cs else None)
    return {
        **other,
        "kernels_per_step": round(len(kc) / steps, 2),
        "kernels_with_launch_call": round(len(linked) / len(kc), 4) if kc else None,
        "calls_per_step": {n: round(c / steps, 2) for n, c in Counter(names).most_common(12)},
        "call_median_ns": {n: int(statistics.median(v)) for n, v in durs.items() if len(v) >= 3},
        "threads": sorted({int(t) for t in a.get("tid", [])})[:8],
        "pids": sorted({int(p) for p in a.get("pid", [])}),
        "launch_to_kernel_start_median_ns": int(statistics.median(lat)) if lat else None,
        "call_ends_before_start": sum(1 for d in a.get("dur_ns", []) if int(d) < 0),
        "driver_calls_per_step": round(sum(1 for d in a.get("domain", []) if d == "driver")
                                       / steps, 2),
    }


def missing_calls(row: dict[str, Any]) -> list[str]:
    """What a capture lacks: GPU records without their call, or nothing recorded."""
    bad = [k for k in ("kernels_with_launch_call", "memcpy_with_call", "memset_with_call")
           if row.get(k) is not None and row[k] < 1.0]
    return bad + ([] if row.get("kernels_per_step") else ["no kernels recorded"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="check.json")
    ap.add_argument("--workload", choices=(*WORKLOADS, "cupy"), default="launch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--via", nargs="+", choices=VIAS, default=list(VIAS))
    args = ap.parse_args()
    if args.workload == "cupy":
        step, sync = cupy_workload()
    else:
        from overhead import make_workload
        from overhead import sync as torch_sync

        step, _ = make_workload(args.workload, batch=args.gpt_batch)
        sync = torch_sync
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    def settle() -> None:
        gc.collect()
        sync()
        time.sleep(0.1)

    out: list[dict[str, Any]] = []
    failed: list[str] = []
    for r in range(args.rounds):
        for via in args.via:
            settings = GpuSettings(api_via="activity" if via == "activity" else "callbacks",
                                   nested_driver=via == "callbacks-nested")
            cap = CuptiCapture(settings, spill_dir=None)
            settle()
            cap.start()
            step()
            sync()
            cap.flush(forced=True)  # the warm-up step's records left out
            for _ in range(args.steps):
                step()
            sync()
            tables = cap.stop()
            m = cap.settings_for_manifest()
            row = {"round": r, "via": via, "api_records_via": m.get("api_records_via"),
                   "api_calls_kept": m.get("api_calls_kept"),
                   "api_records_written": m.get("api_records_written"),
                   "api_records_lost": m.get("api_records_lost"),
                   "api_nested_driver_calls": m.get("api_nested_driver_calls"),
                   "api_nested_other_correlation": m.get("api_nested_other_correlation"),
                   "buffers_zeroed_by": m.get("buffers_zeroed_by"),
                   "cupti_overhead_ns": m.get("cupti_overhead_ns"),
                   "diagnostics": [d.code for d in cap.diagnostics],
                   **summarise(tables, args.steps)}
            out.append(row)
            print(json.dumps(row), flush=True)
            if via == "callbacks" and missing_calls(row):
                failed.append(f"round {r}: {', '.join(missing_calls(row))}")
            step()  # detaches CUPTI
            sync()
    Path(args.out).write_text(json.dumps({"workload": args.workload, "captures": out,
                                          "failed": failed}, indent=1))
    print(f"{args.workload}: " + ("every kernel, copy and memset has its call"
                                  if not failed else "MISSING CALLS: " + "; ".join(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
