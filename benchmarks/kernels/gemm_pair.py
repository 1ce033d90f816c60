"""A compute-bound matmul without tensor cores (fp32, TF32 off) and its fix (bf16 on tensor
cores), for the Nsight Compute deep-dive's ``no tensor cores`` kernel finding (issue 21).

``--time OUT.json`` times both with CUDA events; ``--once`` runs each once inside an NVTX range
(``gemm_fp32`` / ``gemm_bf16``) for ``ncu --nvtx --nvtx-include 'gemm_fp32/' ...``. Needs torch
with CUDA.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time", metavar="OUT_JSON")
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--n", type=int, default=8192)
    args = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(args.n, args.n, device="cuda")
    b = torch.randn(args.n, args.n, device="cuda")
    variants = {"gemm_fp32": (a, b), "gemm_bf16": (a.bfloat16(), b.bfloat16())}
    for x, y in variants.values():
        torch.matmul(x, y)
    torch.cuda.synchronize()
    if args.once:
        for name, (x, y) in variants.items():
            torch.cuda.nvtx.range_push(name)
            torch.matmul(x, y)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    if args.time:
        rows = {}
        for name, (x, y) in variants.items():
            per = []
            for _ in range(7):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(10):
                    torch.matmul(x, y)
                e.record()
                e.synchronize()
                per.append(s.elapsed_time(e) / 10)
            rows[name] = {"ms": statistics.median(per), "ms_all": per, "n": args.n}
            print(f"{name}: {rows[name]['ms']:.3f} ms")
        with open(args.time, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "kernels": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
