#!/usr/bin/env python3
"""The default window on a program that touches the GPU, then works on the host for a while
before its loop (the set-up the window must not take for the loop: ``capture/gpu_flow.py``).

    python3 benchmarks/capture/setup_after_gpu.py --out DIR [--setup-s 8] [--loop-s 20]

Records ``program`` (below) with ``stepscope record`` and the default window, then reports
where the window opened against when the loop started (the program prints it), and whether
the recorded run's steps are the loop's (its kernels per step). Needs a CUDA GPU and torch.
Writes ``DIR/result.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = r'''
import sys, time
import numpy as np
import torch
setup_s, loop_s = float(sys.argv[1]), float(sys.argv[2])
x = torch.randn(2048, 2048, device="cuda")       # the first GPU use
torch.cuda.synchronize()
t0 = time.time_ns()
rng = np.random.default_rng(0)
while time.time_ns() - t0 < setup_s * 1e9:       # host set-up: the GPU idles
    rng.standard_normal(1 << 20).sum()
loop = time.time_ns()
print(f"LOOP_START_NS {loop}", flush=True)
while time.time_ns() - loop < loop_s * 1e9:      # the loop: no optimizer, no marker
    for _ in range(8):
        x = torch.tanh(x @ x) * 0.5
    x.sum().item()
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--setup-s", type=float, default=8.0)
    ap.add_argument("--loop-s", type=float, default=20.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    prog = a.out / "program.py"
    prog.write_text(PROGRAM)
    run = a.out / "run"
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(run), "--force",
                        "--quiet", "--", sys.executable, str(prog), str(a.setup_s),
                        str(a.loop_s)], capture_output=True, text=True, check=False)
    wall = time.time() - t
    loop = next((int(x.split()[1]) for x in p.stdout.splitlines()
                 if x.startswith("LOOP_START_NS")), None)
    manifest = json.loads((run / "manifest.json").read_text()) if (run / "manifest.json").exists() else {}
    r0 = manifest.get("settings", {}).get("ranks", {}).get("rank0", {})
    start = r0.get("window_start_ns")
    out = {"rc": p.returncode, "wall_s": round(wall, 2), "setup_s": a.setup_s,
           "loop_start_ns": loop, "window_start_ns": start, "window": r0.get("window"),
           "window_kind": r0.get("window_kind"), "gpu_first_used_ns": r0.get("gpu_first_used_ns"),
           "window_opens_after_loop_s": (round((start - loop) / 1e9, 3)
                                         if start is not None and loop is not None else None),
           "stderr_tail": p.stderr[-2000:]}
    (a.out / "result.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "stderr_tail"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
