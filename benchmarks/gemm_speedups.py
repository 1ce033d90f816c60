#!/usr/bin/env python3
"""Measure the GEMM / convolution speed-ups that ``stepscope.model.speedups`` tabulates.

On one CUDA GPU, with PyTorch, this times (CUDA events, median of several batches after a
warm-up):

* GEMMs ``C = A @ B`` (M x K times K x N) in fp32 with TF32 off ("ieee"), fp32 with TF32 on,
  bf16 and fp16, on square shapes (1024 ... 8192) and training-like shapes of a GPT-2-small
  sized layer (tokens 8192, hidden 768, MLP 3072);
* 2-D convolutions, forward + both backward passes (``aten.convolution_backward``), NCHW,
  ``cudnn.benchmark`` off (PyTorch's default), in the same four modes;
* 16-bit GEMMs whose dimensions are not multiples of 8 (K = 4095 / 4097, N = 4095, hidden
  768 + 3, GPT-2's vocabulary 50257 vs the padded 50304) against their aligned neighbours,
  compared per FLOP.

and prints one JSON object (also written to ``--out``)::

    {"device": ..., "compute": [9, 0], "driver": ..., "torch": ..., "date": ..., "command": ...,
     "ratios": {"gemm_tf32": 5.1, "gemm_bf16": 9.8, "gemm_fp16": 9.9, "conv_tf32": ...,
                "conv_bf16": ..., "conv_fp16": ..., "half_misaligned": 2.3},
     "per_shape": {"gemm": [...], "conv": [...], "misaligned": [...]},
     "kernels": {case: [kernel names]}, "python_entry": "<literal for speedups.py>"}

Ratios: ``gemm_tf32 = median over GEMM shapes of time(fp32, TF32 off) / time(TF32)``, the
same for bf16/fp16 and for convolutions; ``half_misaligned = median over the misaligned cases
(bf16 and fp16) of (time per FLOP misaligned) / (time per FLOP aligned)``. ``kernels`` lists
the CUDA kernels each mode ran (one profiled call), so the name rules in
``stepscope.analysis.kernel_names`` can be checked against this GPU's libraries.

Run (about a minute on an H100; ``--quick`` for a smoke test)::

    PYTHONPATH=src python3 benchmarks/gemm_speedups.py --out $OUT/gemm.json

Then copy ``python_entry`` into ``MEASURED`` in ``src/stepscope/model/speedups.py``.
Needs only torch (imported after argument parsing, so ``--help`` works anywhere).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

SQUARE = (1024, 2048, 4096, 8192)
# (M, N, K): tokens x out x in of a GPT-2-small layer (8192 tokens = batch 8 x seq 1024)
TRAINING = (
    (8192, 3072, 768),  # MLP up, forward
    (8192, 768, 3072),  # MLP down, forward
    (8192, 2304, 768),  # fused QKV, forward
    (3072, 768, 8192),  # weight gradient of MLP up (reduction over tokens)
)
# (N, C, H, W, K, R, stride): batch, in channels, height, width, out channels, filter, stride
CONVS = (
    (64, 64, 56, 56, 64, 3, 1),
    (64, 128, 28, 28, 128, 3, 1),
    (64, 256, 14, 14, 256, 3, 1),
    (64, 32, 32, 32, 64, 5, 1),
)
# (label, aligned (M, N, K), misaligned (M, N, K))
MISALIGNED = (
    ("K 4096->4095", (4096, 4096, 4096), (4096, 4096, 4095)),
    ("K 4096->4097", (4096, 4096, 4096), (4096, 4096, 4097)),
    ("N 4096->4095", (4096, 4096, 4096), (4096, 4095, 4096)),
    ("hidden 768->771", (8192, 3072, 768), (8192, 3072, 771)),
    ("vocab 50304->50257", (8192, 50304, 768), (8192, 50257, 768)),
)
MODES = ("fp32", "tf32", "bf16", "fp16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Measure fp32 -> TF32 / bf16 / fp16 GEMM and conv speed-ups and the "
                    "misaligned 16-bit GEMM penalty on this CUDA GPU (PyTorch); prints JSON.")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--target-ms", type=float, default=150.0,
                   help="measured GPU time per case, split into --batches batches (default 150)")
    p.add_argument("--batches", type=int, default=7, help="timed batches per case (default 7)")
    p.add_argument("--quick", action="store_true",
                   help="a few small shapes only (smoke test, seconds)")
    p.add_argument("--no-kernels", action="store_true",
                   help="do not profile one call per mode to list kernel names")
    return p.parse_args(argv)


def fail(msg: str) -> NoReturn:
    print(f"gemm_speedups: {msg}", file=sys.stderr)
    raise SystemExit(2)


def driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return None


def cuda_torch(device: int, fail: Callable[[str], NoReturn]) -> Any:
    """torch with CUDA device ``device`` current and ``cudnn.benchmark`` off (PyTorch's
    default); ``fail`` (exit 2) where torch, a GPU or that device is missing."""
    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed; this benchmark needs torch with CUDA")
    if not torch.cuda.is_available():
        fail("no CUDA GPU visible to PyTorch (torch.cuda.is_available() is False); "
             "run this on the GPU machine")
    if device >= torch.cuda.device_count():
        fail(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s)")
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = False
    return torch


class Bench:
    def __init__(self, torch: Any, args: argparse.Namespace) -> None:
        self.torch = torch
        self.args = args
        self.dev = torch.device("cuda", args.device)

    # -- precision switches (new API from torch 2.9 on, the legacy flags before) --------------
    def set_tf32(self, on: bool) -> None:
        t = self.torch
        mm = t.backends.cuda.matmul
        if hasattr(mm, "fp32_precision"):
            mm.fp32_precision = "tf32" if on else "ieee"
        else:
            mm.allow_tf32 = on
        conv = getattr(t.backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):
            conv.fp32_precision = "tf32" if on else "ieee"
        else:
            t.backends.cudnn.allow_tf32 = on

    def dtype(self, mode: str) -> Any:
        t = self.torch
        return {"fp32": t.float32, "tf32": t.float32, "bf16": t.bfloat16, "fp16": t.float16}[mode]

    # -- timing -----------------------------------------------------------------------------
    def time_ms(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds per call: warm-up, then ``batches`` batches of n calls each,
        n chosen so the batches together take about ``target_ms``."""
        t = self.torch
        for _ in range(3):
            fn()
        t.cuda.synchronize()
        e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        one = max(e0.elapsed_time(e1), 1e-3)
        per_batch = self.args.target_ms / self.args.batches
        n = int(min(1000, max(1, per_batch // one)))
        times = []
        for _ in range(self.args.batches):
            e0.record()
            for _ in range(n):
                fn()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / n)
        return float(statistics.median(times))

    def kernels(self, fn: Callable[[], Any]) -> list[str]:
        """Names of the CUDA kernels one call runs (empty when profiling fails)."""
        if self.args.no_kernels:
            return []
        try:
            return list(dict.fromkeys(self.launched(fn)))
        except Exception as exc:  # profiling is a bonus, never a failure
            return [f"(profiler failed: {type(exc).__name__}: {exc})"]

    def launched(self, fn: Callable[[], Any]) -> list[str]:
        """The CUDA kernels one call runs, in order, each launch once (no copies or memsets)."""
        t = self.torch
        from torch.profiler import ProfilerActivity, profile

        t.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            t.cuda.synchronize()
        return [e.name for e in prof.events()
                if str(getattr(e, "device_type", "")).endswith("CUDA")
                and not e.name.startswith(("Memcpy", "Memset", "cuda"))]

    # -- cases ------------------------------------------------------------------------------
    def gemm_fn(self, m: int, n: int, k: int, mode: str) -> Callable[[], Any]:
        t = self.torch
        dt = self.dtype(mode)
        a = t.randn(m, k, device=self.dev, dtype=dt)
        b = t.randn(k, n, device=self.dev, dtype=dt)
        c = t.empty(m, n, device=self.dev, dtype=dt)
        return lambda: t.matmul(a, b, out=c)

    def conv_fn(self, shape: tuple[int, ...], mode: str) -> Callable[[], Any]:
        t = self.torch
        n, c, h, w, k, r, s = shape
        dt = self.dtype(mode)
        x = t.randn(n, c, h, w, device=self.dev, dtype=dt)
        wt = t.randn(k, c, r, r, device=self.dev, dtype=dt) * 0.05
        pad = [r // 2, r // 2]
        stride = [s, s]
        y = t.nn.functional.conv2d(x, wt, stride=stride, padding=pad)
        gy = t.randn_like(y)

        def step() -> Any:
            t.nn.functional.conv2d(x, wt, stride=stride, padding=pad)
            return t.ops.aten.convolution_backward(
                gy, x, wt, None, stride, pad, [1, 1], False, [0, 0], 1, [True, True, False])

        return step

    def run_modes(self, make: Callable[[str], Callable[[], Any]], flops: float,
                  label: str, kernels: dict[str, list[str]]) -> dict[str, Any]:
        ms: dict[str, float] = {}
        for mode in MODES:
            self.set_tf32(mode == "tf32")
            fn = make(mode)
            ms[mode] = self.time_ms(fn)
            if label:
                kernels[f"{label} {mode}"] = self.kernels(fn)
            del fn
        self.set_tf32(False)
        base = ms["fp32"]
        return {
            "ms": {k: round(v, 5) for k, v in ms.items()},
            "tflops": {k: round(flops / (v * 1e-3) / 1e12, 2) for k, v in ms.items()},
            "speedup": {k: round(base / v, 3) for k, v in ms.items() if k != "fp32"},
        }


def median(xs: list[float]) -> float | None:
    return round(float(statistics.median(xs)), 3) if xs else None


def python_entry(res: dict[str, Any]) -> str:
    r = res["ratios"]
    cc = res["compute"]
    fields = ", ".join(f"{k}={r.get(k)!r}" for k in (
        "gemm_tf32", "gemm_bf16", "gemm_fp16", "conv_tf32", "conv_bf16", "conv_fp16",
        "half_misaligned"))
    prov = (f"{res['device']}, driver {res['driver']}, torch {res['torch']} (CUDA {res['cuda']}, "
            f"cuDNN {res['cudnn']}), {res['date']}: {res['command']}")
    return (f"Measured(device={res['device']!r}, compute=({cc[0]}, {cc[1]}), {fields},\n"
            f"         provenance={prov!r}),")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch = cuda_torch(args.device, fail)
    t_start = time.perf_counter()
    props = torch.cuda.get_device_properties(args.device)
    b = Bench(torch, args)
    kernels: dict[str, list[str]] = {}

    square = SQUARE[:2] if args.quick else SQUARE
    training = TRAINING[:1] if args.quick else TRAINING
    convs = CONVS[:1] if args.quick else CONVS
    misaligned = MISALIGNED[:2] if args.quick else MISALIGNED

    gemm_rows = []
    for m, n, k in [(s, s, s) for s in square] + list(training):
        label = f"gemm {m}x{n}x{k}" if (m, n, k) in ((4096, 4096, 4096), training[0]) else ""
        row = b.run_modes(lambda mode, m=m, n=n, k=k: b.gemm_fn(m, n, k, mode), 2.0 * m * n * k,
                          label, kernels)
        gemm_rows.append({"m": m, "n": n, "k": k, **row})
        torch.cuda.empty_cache()

    conv_rows = []
    for shape in convs:
        n_, c, h, w, k, r, s = shape
        ho, wo = (h + 2 * (r // 2) - r) // s + 1, (w + 2 * (r // 2) - r) // s + 1
        flops = 3 * 2.0 * n_ * k * ho * wo * c * r * r  # forward + data grad + weight grad
        label = f"conv {'x'.join(map(str, shape))}"
        row = b.run_modes(lambda mode, shape=shape: b.conv_fn(shape, mode), flops, label, kernels)
        conv_rows.append({"shape": dict(zip("nchwkrs", shape)), **row})
        torch.cuda.empty_cache()

    mis_rows = []
    for label, aligned, bad in misaligned:
        for mode in ("bf16", "fp16"):
            t_al = b.time_ms(b.gemm_fn(*aligned, mode))
            fn = b.gemm_fn(*bad, mode)
            t_bad = b.time_ms(fn)
            f_al = 2.0 * aligned[0] * aligned[1] * aligned[2]
            f_bad = 2.0 * bad[0] * bad[1] * bad[2]
            kernels[f"misaligned {label} {mode}"] = b.kernels(fn)
            del fn
            mis_rows.append({
                "case": label, "dtype": mode, "aligned": list(aligned), "misaligned": list(bad),
                "ms_aligned": round(t_al, 5), "ms_misaligned": round(t_bad, 5),
                "tflops_aligned": round(f_al / (t_al * 1e-3) / 1e12, 2),
                "tflops_misaligned": round(f_bad / (t_bad * 1e-3) / 1e12, 2),
                "slowdown_per_flop": round((t_bad / f_bad) / (t_al / f_al), 3),
            })
            torch.cuda.empty_cache()
    kernels[f"misaligned aligned-reference {MISALIGNED[0][1]} bf16"] = b.kernels(
        b.gemm_fn(*MISALIGNED[0][1], "bf16"))

    ratios = {
        "gemm_tf32": median([r["speedup"]["tf32"] for r in gemm_rows]),
        "gemm_bf16": median([r["speedup"]["bf16"] for r in gemm_rows]),
        "gemm_fp16": median([r["speedup"]["fp16"] for r in gemm_rows]),
        "conv_tf32": median([r["speedup"]["tf32"] for r in conv_rows]),
        "conv_bf16": median([r["speedup"]["bf16"] for r in conv_rows]),
        "conv_fp16": median([r["speedup"]["fp16"] for r in conv_rows]),
        "half_misaligned": median([r["slowdown_per_flop"] for r in mis_rows]),
    }
    res: dict[str, Any] = {
        "schema": 1,
        "device": torch.cuda.get_device_name(args.device),
        "compute": list(torch.cuda.get_device_capability(args.device)),
        "sm_count": props.multi_processor_count,
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": _dt.date.today().isoformat(),
        "command": "python3 benchmarks/gemm_speedups.py " + shlex.join(sys.argv[1:] if argv is None
                                                                       else argv),
        "quick": bool(args.quick),
        "ratios": ratios,
        "per_shape": {"gemm": gemm_rows, "conv": conv_rows, "misaligned": mis_rows},
        "kernels": kernels,
        "elapsed_s": 0.0,
    }
    res["python_entry"] = python_entry(res)
    res["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
