"""Stress test of live capture: no deadlock, no crash, bounded memory, readable runs.

While a training loop runs (DataLoader with worker processes, AdamW, bf16 autocast), THREADS
extra Python threads launch small matmuls on their own CUDA streams, continuously. Then:

  phase 1  capture started and stopped CYCLES times (stepscope.record, 10-step windows)
  phase 2  one long capture of LONG_S seconds (timed window; the session flushes CUPTI buffers
           and writes partitions every 5 s while the threads keep launching)

A watchdog thread dumps every thread's stack and exits with status 3 if the training loop makes
no progress for 60 s (a deadlock), or with status 4 if the end of a ``with stepscope.record()``
block (the run's merge, which decodes the raw CUPTI records in the program) takes longer than
``--merge-limit-s``; the merge is timed on its own, not counted as a stall of the loop. Prints
one JSON line with what each phase recorded, merge times, peak RSS, dropped records and wall
times.

    python benchmarks/stress_capture.py --cycles 30 --long-s 600 --out /tmp/stress
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import stepscope


class Batches(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randn(512)


def summary(path: Path) -> dict[str, Any]:
    from stepscope.store.run import Run

    run = Run(path)
    rows = {}
    for t in ("kernels", "memcpy", "api_calls", "sync", "steps", "input_waits", "samples", "stacks"):
        try:
            rows[t] = int(run.table(t).num_rows)
        except Exception:
            rows[t] = 0
    gpu = {k: (v or {}).get("gpu", {}) for k, v in (run.manifest.settings.get("ranks") or {}).items()}
    g = next(iter(gpu.values()), {})
    return {"rows": rows, "partial": run.manifest.partial,
            "records": g.get("records"), "buffers": g.get("buffers"),
            "peak_pending_bytes": g.get("peak_pending_bytes"), "refused": g.get("buffers_refused"),
            "decode_s": g.get("decode_s"),
            "diagnostics": [f"{d.code}: {d.message}" for d in run.manifest.diagnostics]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--long-s", type=float, default=600.0)
    ap.add_argument("--out", default="/tmp/stepscope-stress")
    ap.add_argument("--max-rows", type=int, default=100_000_000, help="row cap of the long capture")
    ap.add_argument("--merge-limit-s", type=float, default=900.0,
                    help="longest a with-block's end (the run's merge) may take")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda"
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(Batches(), batch_size=256, num_workers=2, pin_memory=True)
    it = iter(loader)
    stop = threading.Event()
    progress = [time.time(), 0]
    merging: list[float] = []  # the time the current with-block's end (the merge) began
    launched = [0] * args.threads

    def worker(k: int) -> None:
        s = torch.cuda.Stream()
        a = torch.randn(256, 256, device=dev)
        with torch.cuda.stream(s):
            while not stop.is_set():
                for _ in range(20):
                    a = torch.tanh(a @ a * 0.01)
                launched[k] += 20
                s.synchronize()
                time.sleep(0.002)

    def watchdog() -> None:
        while not stop.is_set():
            time.sleep(5)
            if merging:
                if time.time() - merging[0] > args.merge_limit_s:
                    faulthandler.dump_traceback(all_threads=True)
                    print(json.dumps({"merge_stuck": True, "steps": progress[1]}), flush=True)
                    os._exit(4)
            elif time.time() - progress[0] > 60:
                faulthandler.dump_traceback(all_threads=True)
                print(json.dumps({"deadlock": True, "steps": progress[1]}), flush=True)
                os._exit(3)

    def merge_begins() -> None:
        merging.append(time.time())

    def merge_ended() -> float:
        took = time.time() - merging.pop()
        progress[0] = time.time()
        return round(took, 1)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True, name=f"launcher-{k}")
               for k in range(args.threads)]
    for t in threads:
        t.start()
    threading.Thread(target=watchdog, daemon=True).start()

    def train_step() -> None:
        x = next(it).to(dev, non_blocking=True)
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if progress[1] % 20 == 0:
            loss.item()
        progress[0] = time.time()
        progress[1] += 1

    result: dict[str, Any] = {"threads": args.threads}
    t0 = time.time()
    for _ in range(20):
        train_step()
    cyc, merges = [], []
    for c in range(args.cycles):  # phase 1: start/stop repeatedly
        path = out / f"cycle-{c:03d}"
        with stepscope.record(path, steps="2-11", overwrite=True, sample_hz=20):
            for _ in range(16):
                train_step()
            merge_begins()
        merges.append(merge_ended())
        cyc.append(summary(path)["rows"]["kernels"])
    result["phase1"] = {"cycles": args.cycles, "wall_s": round(time.time() - t0, 1),
                        "kernels_per_cycle_min": min(cyc) if cyc else None,
                        "kernels_per_cycle_max": max(cyc) if cyc else None,
                        "merge_s_max": max(merges) if merges else None}
    t1 = time.time()
    long_path = out / "long"
    with stepscope.record(long_path, delay=0.0, duration=args.long_s, overwrite=True,
                          max_rows=args.max_rows):
        while time.time() - t1 < args.long_s + 2:
            train_step()
        merge_begins()
    merge_s = merge_ended()
    result["phase2"] = {"capture_s": args.long_s, "wall_s": round(time.time() - t1, 1),
                        "merge_s": merge_s, **summary(long_path)}
    stop.set()
    for t in threads:
        t.join(timeout=10)
    result["steps"] = progress[1]
    result["thread_launches"] = sum(launched)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["deadlock"] = False
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
