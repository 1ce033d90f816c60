#!/usr/bin/env python3
"""Extra scenarios for the kernel rules (small_grid, low_occupancy, no_tensor_cores,
tc_misaligned), complementing the planted suite in ``benchmarks/scenarios/``: every step ends
in ``torch.cuda.synchronize()`` (like a ``loss.item()`` loop), and the kernels take other launch
shapes (12.5% and 18.75% occupancy as 128-thread blocks, a small conv net, GPT-2's vocabulary,
hidden 771). Needs torch and CuPy on a CUDA GPU::

    python3 benchmarks/rule_scenarios.py OUT_DIR

For each scenario the baseline is traced (torch.profiler CPU+CUDA, 3 active steps) into
``OUT_DIR/<name>.pt.trace.json.gz``, and the baseline and each fix are timed untraced (median
step of 40, synchronised per step); ``OUT_DIR/scenarios.json`` holds the step times. Run the
advisor on the traces offline and compare. Results (H200, torch 2.11, 2026-11-22) are quoted
in docs/rules/{small_grid,low_occupancy,no_tensor_cores,tc_misaligned}.md.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import sys
import time

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
dev = torch.device("cuda")
results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"


def timed(step, n=40, warm=8) -> float:
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def trace(step, name: str) -> None:
    path = os.path.join(OUT, name + ".pt.trace.json")
    from torch.profiler import ProfilerActivity, profile, schedule
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=2, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(7):
            step()
            torch.cuda.synchronize()
            prof.step()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(path)


def mlp_step(dims, tokens, dtype_ctx, vocab=None, lr=1e-3):
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    if vocab:
        layers.append(torch.nn.Linear(dims[-1], vocab))
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(tokens, dims[0], device=dev)

    def step():
        with dtype_ctx():
            y = model(x)
            loss = y.float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def fp32_ctx():
    import contextlib
    return contextlib.nullcontext()


def bf16_ctx():
    return torch.autocast("cuda", dtype=torch.bfloat16)


def cnn_step(dtype_ctx, batch=128):
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, 64, 64, device=dev)
    t = torch.randint(0, 10, (batch,), device=dev)

    def step():
        with dtype_ctx():
            loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def run(name, fn):
    try:
        results[name] = fn()
    except Exception as exc:  # keep going
        import traceback
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()[-2000:]}
    print(name, json.dumps(results[name])[:400], file=sys.stderr, flush=True)


torch.backends.cudnn.benchmark = False


def sc_cnn():
    set_tf32(False)
    base = cnn_step(fp32_ctx)
    trace(base, "cnn_fp32")
    r = {"base_ms": timed(base)}
    set_tf32(True)
    r["tf32_ms"] = timed(cnn_step(fp32_ctx))
    set_tf32(False)
    r["bf16_ms"] = timed(cnn_step(bf16_ctx))
    return r


def sc_mlp():
    set_tf32(False)
    dims = [768, 3072, 768, 3072, 768]
    base = mlp_step(dims, 8192, fp32_ctx)
    trace(base, "mlp_fp32")
    r = {"base_ms": timed(base)}
    set_tf32(True)
    r["tf32_ms"] = timed(mlp_step(dims, 8192, fp32_ctx))
    set_tf32(False)
    r["bf16_ms"] = timed(mlp_step(dims, 8192, bf16_ctx))
    return r


def sc_misaligned():
    set_tf32(False)
    base = mlp_step([768, 3072, 768], 8192, bf16_ctx, vocab=50257)
    trace(base, "misaligned_vocab")
    r = {"base_ms": timed(base)}
    r["fixed_ms"] = timed(mlp_step([768, 3072, 768], 8192, bf16_ctx, vocab=50304))
    base2 = mlp_step([771, 3084, 771, 3084, 771], 8192, bf16_ctx)
    trace(base2, "misaligned_hidden")
    r["hidden_base_ms"] = timed(base2)
    r["hidden_fixed_ms"] = timed(mlp_step([776, 3088, 776, 3088, 776], 8192, bf16_ctx))
    return r


SRC = r'''
extern "C" __global__ void %s(const float* __restrict__ x, float* __restrict__ y, long long n, float a) {
    extern __shared__ float pad[];
    if (n < 0) pad[threadIdx.x] = a;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] * a + 1.0f;
}
'''


def custom_step(kname, grid, block, smem, n=1 << 26):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel(SRC % kname, kname)
    if smem > 48 * 1024:
        k.max_dynamic_shared_size_bytes = smem
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    xc, yc = cp.asarray(x), cp.asarray(y)
    healthy = mlp_step([768, 3072, 768], 4096, bf16_ctx)

    def step():
        healthy()
        k((grid,), (block,), (xc, yc, np.int64(n), np.float32(2.0)), shared_mem=smem)
    return step


def sc_small_grid():
    base = custom_step("scale_small_grid", 16, 128, 0)
    trace(base, "small_grid")
    r = {"base_ms": timed(base)}
    r["fixed_ms"] = timed(custom_step("scale_small_grid", 132 * 8, 128, 0))
    r["healthy_only_ms"] = timed(mlp_step([768, 3072, 768], 4096, bf16_ctx))
    return r


def sc_low_occ():
    base = custom_step("scale_low_occ", 132 * 16, 128, 96 * 1024)
    trace(base, "low_occupancy")
    r = {"base_ms": timed(base)}
    r["fixed_ms"] = timed(custom_step("scale_low_occ", 132 * 16, 128, 0))
    # a milder case: 64 KB -> 3 blocks/SM of 4 warps = 18.75%
    mild = custom_step("scale_mild_occ", 132 * 16, 128, 64 * 1024)
    trace(mild, "mild_occupancy")
    r["mild_ms"] = timed(mild)
    return r


for name, fn in (("cnn", sc_cnn), ("mlp", sc_mlp), ("misaligned", sc_misaligned),
                 ("small_grid", sc_small_grid), ("low_occ", sc_low_occ)):
    run(name, fn)
with open(os.path.join(OUT, "scenarios.json"), "w") as f:
    json.dump(results, f, indent=1)
print(json.dumps(results, indent=1))
