#!/usr/bin/env python3
"""What the memory layout does to a convolution's TF32 and bf16 speed-ups: NCHW against
channels_last (NHWC), and the layout transposes cuDNN runs for NCHW tensors.

On one CUDA GPU, with PyTorch, for ``gemm_speedups.CONVS`` (forward + both backward passes,
``cudnn.benchmark`` off, timed as ``gemm_speedups.py`` times them): fp32 NCHW with TF32 off
(the baseline), TF32 and bf16 on NCHW tensors, and TF32 and bf16 on channels_last tensors
(input, weight and output gradient). One call per mode is profiled to count its kernels and,
among them, cuDNN's layout transposes (``nchwToNhwc`` / ``nhwcToNchw``): with TF32 or bf16
cuDNN runs NHWC tensor-core kernels, and an NCHW tensor is transposed to them and back.

Prints one JSON object (also written to ``--out``): per shape the ms, the speed-ups over fp32
NCHW and the kernel counts per mode; ``ratios``: the medians over the shapes
(``conv_bf16_nhwc``: fp32 NCHW / bf16 channels_last, what ``model.speedups`` keeps for the
``channels_last`` option; ``conv_bf16`` and ``conv_tf32``: the NCHW ones, to compare with
``gemm_speedups.py``'s); ``transposes``: the median transposes per call of each mode.

    PYTHONPATH=src python3 benchmarks/conv_layouts.py --out $OUT/conv_layouts.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from gemm_speedups import CONVS, Bench, cuda_torch, driver_version  # noqa: E402

# (label, TF32 on, dtype name, channels_last)
MODES = (("fp32", False, "fp32", False), ("tf32", True, "fp32", False),
         ("bf16", False, "bf16", False), ("tf32_nhwc", True, "fp32", True),
         ("bf16_nhwc", False, "bf16", True))
TRANSPOSE = re.compile(r"nchwToNhwc|nhwcToNchw")


def fail(msg: str) -> NoReturn:
    print(f"conv_layouts: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--target-ms", type=float, default=150.0,
                   help="measured GPU time per case, split into --batches batches (default 150)")
    p.add_argument("--batches", type=int, default=7, help="timed batches per case (default 7)")
    p.add_argument("--quick", action="store_true", help="the first shape only (smoke test)")
    return p.parse_args(argv)


def conv_fn(b: Bench, shape: tuple[int, ...], tf32: bool, dtype: str, nhwc: bool
            ) -> Callable[[], Any]:
    t = b.torch
    b.set_tf32(tf32)
    n, c, h, w, k, r, s = shape
    dt = b.dtype(dtype)
    fmt = t.channels_last if nhwc else t.contiguous_format
    x = t.randn(n, c, h, w, device=b.dev, dtype=dt).contiguous(memory_format=fmt)
    wt = (t.randn(k, c, r, r, device=b.dev, dtype=dt) * 0.05).contiguous(memory_format=fmt)
    pad, stride = [r // 2, r // 2], [s, s]
    gy = t.randn_like(t.nn.functional.conv2d(x, wt, stride=stride, padding=pad)).contiguous(
        memory_format=fmt)

    def step() -> Any:
        t.nn.functional.conv2d(x, wt, stride=stride, padding=pad)
        return t.ops.aten.convolution_backward(
            gy, x, wt, None, stride, pad, [1, 1], False, [0, 0], 1, [True, True, False])

    return step


def kernel_counts(b: Bench, fn: Callable[[], Any]) -> dict[str, int]:
    """Kernels one call runs, and the layout transposes among them."""
    names = b.launched(fn)
    return {"kernels": len(names), "transposes": sum(bool(TRANSPOSE.search(n)) for n in names)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch = cuda_torch(args.device, fail)
    b = Bench(torch, argparse.Namespace(device=args.device, target_ms=args.target_ms,
                                        batches=args.batches, no_kernels=True))
    rows = []
    for shape in CONVS[:1] if args.quick else CONVS:
        ms: dict[str, float] = {}
        counts: dict[str, dict[str, int]] = {}
        for label, tf32, dtype, nhwc in MODES:
            fn = conv_fn(b, shape, tf32, dtype, nhwc)
            ms[label] = b.time_ms(fn)
            counts[label] = kernel_counts(b, fn)
            del fn
        b.set_tf32(False)
        rows.append({"shape": dict(zip("nchwkrs", shape)),
                     "ms": {k: round(v, 5) for k, v in ms.items()},
                     "speedup": {k: round(ms["fp32"] / v, 3) for k, v in ms.items()
                                 if k != "fp32"},
                     "kernels": counts})
        torch.cuda.empty_cache()

    def med(xs: list[float]) -> float:
        return round(float(statistics.median(xs)), 3)

    res = {
        "device": torch.cuda.get_device_name(args.device),
        "compute": list(torch.cuda.get_device_capability(args.device)),
        "driver": driver_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "date": _dt.date.today().isoformat(),
        "command": "python3 benchmarks/conv_layouts.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "ratios": {f"conv_{m}": med([r["speedup"][m] for r in rows])
                   for m in ("tf32", "bf16", "tf32_nhwc", "bf16_nhwc")},
        "transposes": {m: med([r["kernels"][m]["transposes"] for r in rows])
                       for m, *_ in MODES},
        "per_shape": rows,
    }
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
