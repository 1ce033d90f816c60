"""What CUPTI costs the program in each of its states, and what switching between them costs,
in one process (the numbers a "trace some steps, not all" design needs):

  plain     CUPTI not initialised (before any capture), or detached (cuptiFinalize) after one
  traced    stepscope's default kinds on (kernels, copies, memsets, syncs, NVTX, overhead,
            filtered runtime/driver calls)
  idle      CUPTI initialised, every kind off (what a capture leaves behind without detaching)
  nokernel  everything of ``traced`` but the kernel records

Sequence: plain blocks; start (cold); then rounds of traced / idle / traced / nokernel blocks,
timing each switch (``CuptiCapture`` disables kinds; ``start`` enables them again, with the
per-call switches of the API filter); stop and detach; plain blocks; then rounds of
start-traced-stop-detach-plain, timing a cold start after a detach, the stop and the step that
runs the detach. Every step is timed (the launch loop: the host's launch time; the GPT step
reads its loss, so its time is the device's).

    python benchmarks/capture/cupti_states.py --out states.json --workload launch|gpt [--rounds 6]
        [--api filtered|all|none] [--prealloc N] [--torch-rounds R]

``--prealloc N`` asks CUPTI to allocate N device buffers and N semaphore pools when it starts
(activity attributes 6 and 7) instead of on demand, in the program's thread. ``--torch-rounds``
ends with rounds of torch.profiler (CUDA activities) block / plain block (last: after
torch.profiler, PyTorch keeps a CUPTI subscriber, and stepscope can no longer detach). CUPTI's
activity attributes as found (before any change) are kept in the output. Steps over 1.5x their
block's median are counted as spikes (count and ms over the median).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS, make_workload, settle, steps_for, sync  # noqa: E402

ATTRIBUTES = {0: "DEVICE_BUFFER_SIZE", 2: "DEVICE_BUFFER_POOL_LIMIT",
              3: "PROFILING_SEMAPHORE_POOL_SIZE", 4: "PROFILING_SEMAPHORE_POOL_LIMIT",
              6: "DEVICE_BUFFER_PRE_ALLOCATE_VALUE", 7: "PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE"}


def read_attributes(lib: Any) -> dict[str, Any]:
    """CUPTI's size_t activity attributes (cupti_activity.h's CUpti_ActivityAttribute)."""
    out: dict[str, Any] = {}
    for attr, name in ATTRIBUTES.items():
        v = ctypes.c_size_t(0)
        rc = lib.cuptiActivityGetAttribute(attr, ctypes.byref(ctypes.c_size_t(8)), ctypes.byref(v))
        out[name] = int(v.value) if rc == 0 else f"error {rc}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="states.json")
    ap.add_argument("--workload", choices=WORKLOADS, default="launch")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block-s", type=float, default=0.6)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--api", choices=("filtered", "all", "none"), default="filtered")
    ap.add_argument("--prealloc", type=int, default=0)
    ap.add_argument("--torch-rounds", type=int, default=0)
    args = ap.parse_args()
    from stepscope.capture.cupti import detach
    from stepscope.capture.cupti import layouts as L
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    step, _ = make_workload(args.workload, batch=args.gpt_batch)
    n = steps_for(step, args.block_s, 10)
    cap = CuptiCapture(GpuSettings(detach=False, api=args.api, api_via="activity"),
                       spill_dir=Path(tempfile.mkdtemp()) / "spill")
    attrs = read_attributes(cap.lib)
    if args.prealloc:
        for attr in (6, 7):  # DEVICE_BUFFER_PRE_ALLOCATE_VALUE, PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE
            v = ctypes.c_size_t(args.prealloc)
            rc = cap.lib.cuptiActivitySetAttribute(attr, ctypes.byref(ctypes.c_size_t(8)),
                                                   ctypes.byref(v))
            attrs[f"set {attr}"] = rc
    blocks: list[dict[str, Any]] = []
    switches: list[dict[str, Any]] = []

    def block(state: str) -> None:
        settle()
        before = cap.records
        ts = []
        t0 = time.perf_counter()
        for _ in range(n):
            step()
            ts.append(time.perf_counter())
        sync()
        end = time.perf_counter()
        ms = [round((b - a) * 1e3, 3) for a, b in zip([t0] + ts, ts)]
        if cap.running:
            cap.flush(forced=True)
        med = statistics.median(ms)
        spikes = [x - med for x in ms if x > 1.5 * med]
        blocks.append({"state": state, "ms": (end - t0) / n * 1e3, "step_ms": ms,
                       "records": cap.records - before, "t": time.time(),
                       "spikes": len(spikes), "spike_ms": round(sum(spikes), 2)})

    def switch(name: str, fn: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        fn()
        switches.append({"switch": name, "ms": round((time.perf_counter() - t0) * 1e3, 3)})

    def timed_step(name: str) -> None:
        t0 = time.perf_counter()
        step()
        sync()
        switches.append({"switch": name, "ms": round((time.perf_counter() - t0) * 1e3, 3)})

    block("plain")
    block("plain")
    switch("start (first)", cap.start)
    block("traced")
    for _ in range(args.rounds):
        switch("all kinds off", cap._disable)
        block("idle")
        switch("all kinds on", cap.start)
        block("traced")
        switch("kernel kind off", lambda: cap.lib.cuptiActivityDisable(L.CONCURRENT_KERNEL))
        block("nokernel")
        switch("kernel kind on", lambda: cap.lib.cuptiActivityEnable(L.CONCURRENT_KERNEL))
        block("traced")
    for _ in range(args.rounds):
        switch("stop", cap.stop)
        switch("arm detach", lambda: detach.arm(cap.lib, cap.shim, cap.version))
        timed_step("step that detaches")
        switches.append({"switch": "detach state", "ms": 0, "state": detach.state(cap.shim)})
        block("plain")
        switch("start (after a detach)", cap.start)
        block("traced")
    switch("stop", cap.stop)
    detach.arm(cap.lib, cap.shim, cap.version)
    timed_step("step that detaches")
    for _ in range(args.torch_rounds):
        import torch

        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        switch("torch.profiler start", prof.start)
        block("torch-cuda")
        switch("torch.profiler stop", prof.stop)
        del prof
        block("plain")
    summary: dict[str, Any] = {"api": args.api, "prealloc": args.prealloc, "attributes": attrs,
                               "libcupti": cap.path, "cupti_api_version": cap.version,
                               "buffers": cap.buffers, "records_total": cap.records,
                               "spill_s": round(cap.decode_s, 4), "verify_s": round(cap.verify_s, 4),
                               "diagnostics": [f"{d.level} {d.code}: {d.message}"
                                               for d in cap.diagnostics]}
    for state in ("plain", "traced", "idle", "nokernel", "torch-cuda"):
        ms = [b["ms"] for b in blocks if b["state"] == state]
        if ms:
            summary[state] = {"blocks": len(ms), "median_ms": round(statistics.median(ms), 3),
                              "records_per_block": statistics.median(
                                  b["records"] for b in blocks if b["state"] == state),
                              "spikes": sum(b["spikes"] for b in blocks if b["state"] == state),
                              "spike_ms": round(sum(b["spike_ms"] for b in blocks
                                                    if b["state"] == state), 1)}
    # each block against the traced blocks next to it
    for state, ref in (("plain", "traced"), ("idle", "traced"), ("nokernel", "traced"),
                       ("plain", "torch-cuda")):
        rs = []
        for j, b in enumerate(blocks):
            near = [blocks[k]["ms"] for k in (j - 1, j + 1)
                    if 0 <= k < len(blocks) and blocks[k]["state"] == ref]
            if b["state"] == state and near:
                rs.append(statistics.mean(near) / b["ms"])
        if rs:
            summary[f"{ref} / {state} (adjacent)"] = round(statistics.median(rs), 4)
    for name in sorted({s["switch"] for s in switches}):
        ms = [s["ms"] for s in switches if s["switch"] == name]
        summary[f"switch: {name}"] = {"n": len(ms), "median_ms": round(statistics.median(ms), 3),
                                      "max_ms": round(max(ms), 3)}
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"workload": args.workload, "steps_per_block": n,
                                          "summary": summary, "blocks": blocks,
                                          "switches": switches}, indent=1))


if __name__ == "__main__":
    main()
