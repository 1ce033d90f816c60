"""Are the runtime/driver call records taken through CUPTI's callbacks the records CUPTI's
activity kinds give? One process, captures alternating between the two (``api_via``
"callbacks" and "activity", stepscope's CUPTI capture alone, decoded at stop), on a workload;
per capture: kernels and how many of them have their launch call (same correlation id), calls
per step by name, the threads and processes the calls name, the median duration of each call,
and the median time from a launch call's start to its kernel's start.

    python benchmarks/capture/api_records_check.py --out check.json --workload launch|gpt
        [--rounds 3] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS, make_workload, settle, sync  # noqa: E402


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
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="check.json")
    ap.add_argument("--workload", choices=WORKLOADS, default="launch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gpt-batch", type=int, default=8)
    args = ap.parse_args()
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    step, _ = make_workload(args.workload, batch=args.gpt_batch)
    out: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for via in ("callbacks", "activity"):
            cap = CuptiCapture(GpuSettings(api_via=via), spill_dir=None)
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
                   "diagnostics": [d.code for d in cap.diagnostics],
                   **summarise(tables, args.steps)}
            out.append(row)
            print(json.dumps(row), flush=True)
            step()  # detaches CUPTI
            sync()
    Path(args.out).write_text(json.dumps({"workload": args.workload, "captures": out}, indent=1))


if __name__ == "__main__":
    main()
