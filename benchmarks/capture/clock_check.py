"""Check CUPTI timestamps against the host clock, step by step, in one process.

Each step is timed on the host (time.time_ns around the step, with a device synchronize at its
end); every kernel CUPTI records must fall inside the host interval of its step, and the GPU
time of a step cannot exceed its host time. Also prints which runtime callbacks the filtered API
mode enabled.

    python benchmarks/capture/clock_check.py
"""

from __future__ import annotations

import ctypes
import json
import time

import numpy as np
import torch

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.capture import CuptiCapture
from stepscope.capture.cupti.settings import GpuSettings


def main() -> None:
    dev = "cuda"
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device=dev)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    cap = CuptiCapture(GpuSettings(api="filtered"))
    t_start = time.perf_counter()
    cap.start()
    print(f"start() took {(time.perf_counter() - t_start) * 1e3:.1f} ms")
    print("api calls kept / switched off:", cap.calls.kept, cap.calls.off)
    rt = cap.lib.cuptiActivityEnableRuntimeApi
    name = cap._callback_name(L.DOMAIN_RUNTIME_API, 211)
    rc = rt(211, 1)
    print("cbid 211:", name, "enable rc:", rc, cap._error(rc))
    dr = cap.lib.cuptiActivityEnableDriverApi
    rc = dr(307, 1)
    print("driver cbid 307:", cap._callback_name(L.DOMAIN_DRIVER_API, 307), "enable rc:", rc, cap._error(rc))
    host = []
    for _ in range(10):
        t0 = time.time_ns()
        step()
        torch.cuda.synchronize()
        t1 = time.time_ns()
        host.append((t0, t1))
        time.sleep(0.02)
    tables = cap.stop()
    k = tables.get("kernels", {})
    ts = np.asarray(k.get("ts_ns", []), dtype=np.int64)
    end = ts + np.asarray(k.get("dur_ns", []), dtype=np.int64)
    out = {"kernels": len(ts), "tables": {n: len(next(iter(c.values()))) for n, c in tables.items()},
           "settings": cap.settings_for_manifest(), "steps": []}
    for t0, t1 in host:
        inside = (ts >= t0) & (end <= t1)
        near = (ts >= t0 - 50_000_000) & (ts <= t1 + 50_000_000)
        out["steps"].append({"host_ms": (t1 - t0) / 1e6, "kernels_inside": int(inside.sum()),
                             "kernels_within_50ms": int(near.sum()),
                             "gpu_span_ms": float((end[near].max() - ts[near].min()) / 1e6) if near.any() else None})
    if len(ts):
        out["first_kernel_minus_first_step_ms"] = (int(ts.min()) - host[0][0]) / 1e6
        out["last_kernel_end_minus_last_step_end_ms"] = (int(end.max()) - host[-1][1]) / 1e6
        out["kernel_span_ms"] = (int(end.max()) - int(ts.min())) / 1e6
        out["host_span_ms"] = (host[-1][1] - host[0][0]) / 1e6
    a = tables.get("api_calls")
    if a:
        ats = np.asarray(a["ts_ns"], dtype=np.int64)
        out["api_span_ms"] = float((ats.max() - ats.min()) / 1e6)
        out["api_names"] = sorted(set(a["name"]))[:30]
    ct = ctypes.c_uint64(0)
    cap.lib.cuptiGetTimestamp(ctypes.byref(ct))
    out["cupti_minus_time_ns_ms"] = (int(ct.value) - time.time_ns()) / 1e6
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
