"""Does the cupti-python backend detach CUPTI after its capture, and what does that spare the
program's later steps? One process, the launch loop (torch), µs per launch in blocks:

  plain blocks; a cupti-python capture; the detach state after the next CUDA call; plain blocks;
  a second capture (CUPTI starting again after the detach) and its records; the same once more
  with the detach switched off (``GpuSettings(detach=False)``, CUPTI left attached); plain blocks

    python benchmarks/capture/pycupti_detach.py --out pycupti.json [--blocks 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="pycupti.json")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--launches", type=int, default=4000)
    args = ap.parse_args()
    import torch

    from stepscope.capture.cupti import detach
    from stepscope.capture.cupti.native import mapped_libcupti
    from stepscope.capture.cupti.pycupti import PyCuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    x = torch.zeros(256, device="cuda")

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(args.launches):
            x.add_(1.0)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / args.launches * 1e6

    def blocks() -> list[float]:
        return [round(block(), 3) for _ in range(args.blocks)]

    out: dict[str, Any] = {}
    blocks()  # warm-up
    out["plain_before_us"] = blocks()
    for name, settings in (("detach", GpuSettings()), ("attached", GpuSettings(detach=False))):
        cap = PyCuptiCapture(settings)
        cycles = []
        for _ in range(2):
            cap.start()
            captured = blocks()
            tables = cap.stop()
            torch.cuda.synchronize()  # a CUDA call: an armed detach runs at its exit
            shim = cap._detacher.shim if cap._detacher is not None else None
            cycles.append({"captured_us": captured,
                           "kernels": len(next(iter((tables.get("kernels") or {}).values()), [])),
                           "detach_state": detach.state(shim) if shim is not None else None,
                           "plain_after_us": blocks()})
        out[name] = {"cycles": cycles, "manifest": cap.settings_for_manifest(),
                     "diagnostics": [d.message for d in cap.diagnostics]}
    out["libcupti"] = mapped_libcupti()
    med = statistics.median
    base = med(out["plain_before_us"])
    for name in ("detach", "attached"):
        c = out[name]["cycles"]
        print(f"{name:9s} captured x{med(c[0]['captured_us']) / base:.3f}, x{med(c[1]['captured_us']) / base:.3f}; "
              f"plain after x{med(c[0]['plain_after_us']) / base:.3f}, x{med(c[1]['plain_after_us']) / base:.3f}; "
              f"kernels {c[0]['kernels']}, {c[1]['kernels']}; detach {c[0]['detach_state']}, "
              f"{c[1]['detach_state']}; {out[name]['manifest']}; {out[name]['diagnostics']}", flush=True)
    print(f"plain before {base:.3f} us per launch; libcupti {out['libcupti']}")
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
