"""Planted kernels and their fixed twins, for the Nsight Compute deep-dive (issue 21).

Five pairs, each a kernel with one planted problem and a twin with the same result without it:

- ``narrow_load``: one byte loaded and stored per thread vs 16 bytes (``uint4``) per thread
  (the first seed article's byte vs vector loads);
- ``strided_read``: a gather reading a [S][n/S] matrix in column order (each warp touches 32
  rows) vs the same elements read in row order (unit stride);
- ``smem_transpose``: a 32x32-tile shared-memory transpose without padding (32-way bank
  conflicts on the column reads) vs with one column of padding;
- ``regs_chase``: a latency-bound pointer chase that keeps 160 floats live in registers across
  the chase (occupancy limited by registers: one 256-thread block per SM) vs the same sum loaded
  after the chase (all warps resident);
- ``regs_lines`` (added after the first H100 session, not in tests/data/ncu yet): the register
  pair again with a coalesced chase: each warp follows one chain of 128-byte lines, lane i
  reading word i of the line (4 sectors per request), so that the occupancy problem is the
  only one (``regs_chase`` gathers at random in both twins, which ``kernel_uncoalesced``
  rightly flags in both);
- ``tail_wave``: a compute-bound kernel of 1.25 waves (one 1024-thread block per SM; the last
  wave a quarter full) vs the same work in 1.0 wave of longer blocks.

``--time OUT.json`` times each kernel with CUDA events (median of repeats, default clocks);
``--once`` launches each kernel once after the inputs are built, for
``ncu --kernel-name regex:'^(planted|fixed)_' --launch-count 10 ...``. Needs CuPy and a GPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

SOURCE = r"""
extern "C" {

__global__ void planted_narrow_load(const unsigned char* __restrict__ in,
                                    unsigned char* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)(in[i] + 1);
}

__global__ void fixed_narrow_load(const uint4* __restrict__ in, uint4* __restrict__ out,
                                  long long n16) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) {
        uint4 v = in[i];
        v.x = __vadd4(v.x, 0x01010101u); v.y = __vadd4(v.y, 0x01010101u);
        v.z = __vadd4(v.z, 0x01010101u); v.w = __vadd4(v.w, 0x01010101u);
        out[i] = v;
    }
}

// element i of the output is element (i % S, i / S) of a [S][n/S] row-major input
__global__ void planted_strided_read(const float* __restrict__ in, float* __restrict__ out,
                                     long long n, long long s) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[(i % s) * (n / s) + i / s] * 2.0f;
}

// the same elements, read in row order (the fix: a layout read with unit stride)
__global__ void fixed_strided_read(const float* __restrict__ in, float* __restrict__ out,
                                   long long n, long long s) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
}

#define TILE 32
#define ROWS 8
__global__ void planted_smem_transpose(const float* __restrict__ in, float* __restrict__ out,
                                       int w) {
    __shared__ float tile[TILE][TILE];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) out[(y + j) * w + x] = tile[threadIdx.x][threadIdx.y + j];
}

__global__ void fixed_smem_transpose(const float* __restrict__ in, float* __restrict__ out,
                                     int w) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x; y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) out[(y + j) * w + x] = tile[threadIdx.x][threadIdx.y + j];
}

#define LIVE 160
__global__ void planted_regs_chase(const int* __restrict__ next, const float* __restrict__ vals,
                                   float* __restrict__ out, int mask, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float r[LIVE];
#pragma unroll
    for (int k = 0; k < LIVE; ++k) r[k] = vals[(t * 7 + k * 131) & mask];
    int idx = (t * 2654435761u) & mask;
    for (int s = 0; s < steps; ++s) {
        idx = next[idx];
#pragma unroll
        for (int k = 0; k < LIVE; ++k) asm volatile("" : "+f"(r[k]));  // kept live, no work
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < LIVE; ++k) acc += r[k];
    out[t] = acc + (float)idx;
}

__global__ void fixed_regs_chase(const int* __restrict__ next, const float* __restrict__ vals,
                                 float* __restrict__ out, int mask, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int idx = (t * 2654435761u) & mask;
    for (int s = 0; s < steps; ++s) idx = next[idx];
    float acc = 0.0f;
#pragma unroll 8
    for (int k = 0; k < LIVE; ++k) acc += vals[(t * 7 + k * 131) & mask];
    out[t] = acc + (float)idx;
}

// the chase of regs_chase over 128-byte lines: the warp's lanes read one line together
__global__ void planted_regs_lines(const int* __restrict__ next, const float* __restrict__ vals,
                                   float* __restrict__ out, int line_mask, int mask, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    float r[LIVE];
#pragma unroll
    for (int k = 0; k < LIVE; ++k) r[k] = vals[(t + k * 4096) & mask];
    int line = ((t >> 5) * 2654435761u) & line_mask;
    for (int s = 0; s < steps; ++s) {
        line = next[line * 32 + lane];
#pragma unroll
        for (int k = 0; k < LIVE; ++k) asm volatile("" : "+f"(r[k]));  // kept live, no work
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < LIVE; ++k) acc += r[k];
    out[t] = acc + (float)line;
}

__global__ void fixed_regs_lines(const int* __restrict__ next, const float* __restrict__ vals,
                                 float* __restrict__ out, int line_mask, int mask, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    int line = ((t >> 5) * 2654435761u) & line_mask;
    for (int s = 0; s < steps; ++s) line = next[line * 32 + lane];
    float acc = 0.0f;
#pragma unroll 8
    for (int k = 0; k < LIVE; ++k) acc += vals[(t + k * 4096) & mask];
    out[t] = acc + (float)line;
}

// each block: 1024 threads, FMA chains for `iters` iterations; dynamic shared memory (unused
// but reserved) keeps one block per SM
__global__ void planted_tail_wave(float* __restrict__ out, int iters) {
    extern __shared__ float pad[];
    float a = threadIdx.x * 1e-3f, b = a + 1.0f, c = a + 2.0f, d = a + 3.0f;
    for (int i = 0; i < iters; ++i) {
        a = a * 0.9999f + 0.5f; b = b * 0.9999f + 0.5f; c = c * 0.9999f + 0.5f; d = d * 0.9999f + 0.5f;
    }
    if (threadIdx.x == 0) pad[0] = a;
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

__global__ void fixed_tail_wave(float* __restrict__ out, int iters) {
    extern __shared__ float pad[];
    float a = threadIdx.x * 1e-3f, b = a + 1.0f, c = a + 2.0f, d = a + 3.0f;
    for (int i = 0; i < iters; ++i) {
        a = a * 0.9999f + 0.5f; b = b * 0.9999f + 0.5f; c = c * 0.9999f + 0.5f; d = d * 0.9999f + 0.5f;
    }
    if (threadIdx.x == 0) pad[0] = a;
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

}
"""

PAIRS = ("narrow_load", "strided_read", "smem_transpose", "regs_chase", "regs_lines",
         "tail_wave")
TAIL_SMEM = 150 * 1024


def build(cp: Any) -> list[dict[str, Any]]:
    """Each kernel with its launch: name, pair, role, grid, block, shared memory, arguments."""
    dev = cp.cuda.Device()
    sms = int(dev.attributes["MultiProcessorCount"])
    kern = {f"{role}_{p}": cp.RawKernel(SOURCE, f"{role}_{p}", options=("-lineinfo",))
            for p in PAIRS for role in ("planted", "fixed")}
    for role in ("planted", "fixed"):
        kern[f"{role}_tail_wave"].max_dynamic_shared_size_bytes = TAIL_SMEM
    launches: list[dict[str, Any]] = []

    def add(name: str, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
            smem: int = 0) -> None:
        pair = name.split("_", 1)[1]
        launches.append({"name": name, "pair": pair, "role": name.split("_", 1)[0],
                         "grid": list(grid), "block": list(block), "smem": smem,
                         "kernel": kern[name], "args": args})

    nb = 1 << 28  # 256 MiB of bytes
    b_in = cp.arange(nb, dtype=cp.uint32).astype(cp.uint8)
    b_out = cp.empty_like(b_in)
    add("planted_narrow_load", ((nb + 255) // 256,), (256,), (b_in, b_out, cp.int64(nb)))
    add("fixed_narrow_load", ((nb // 16 + 255) // 256,), (256,), (b_in, b_out, cp.int64(nb // 16)))

    nf, s = 1 << 26, 1024  # 64 Mi floats (256 MiB), 1024 rows
    f_in = cp.random.random(nf, dtype=cp.float32)
    f_out = cp.empty_like(f_in)
    for role in ("planted", "fixed"):
        add(f"{role}_strided_read", ((nf + 255) // 256,), (256,),
            (f_in, f_out, cp.int64(nf), cp.int64(s)))

    w = 8192  # 8192 x 8192 floats
    t_in = cp.random.random((w, w), dtype=cp.float32)
    t_out = cp.empty_like(t_in)
    for role in ("planted", "fixed"):
        add(f"{role}_smem_transpose", (w // 32, w // 32), (32, 8), (t_in, t_out, cp.int32(w)))

    nn = 1 << 24  # 64 MiB of indices: one random cycle over them (more than L2 holds)
    perm = cp.random.permutation(nn).astype(cp.int32)
    nxt = cp.empty(nn, dtype=cp.int32)
    nxt[perm] = cp.roll(perm, -1)
    vals = cp.random.random(nn, dtype=cp.float32)
    threads = sms * 2048  # one full-occupancy wave when all warps fit
    c_out = cp.empty(threads, dtype=cp.float32)
    for role in ("planted", "fixed"):
        add(f"{role}_regs_chase", (threads // 256,), (256,),
            (nxt, vals, c_out, cp.int32(nn - 1), cp.int32(48)))

    lines = nn // 32  # one random cycle over 128-byte lines; every lane of a line says the same
    lperm = cp.random.permutation(lines).astype(cp.int32)
    lnext = cp.empty(lines, dtype=cp.int32)
    lnext[lperm] = cp.roll(lperm, -1)
    nxt_lines = cp.repeat(lnext, 32)
    for role in ("planted", "fixed"):
        add(f"{role}_regs_lines", (threads // 256,), (256,),
            (nxt_lines, vals, c_out, cp.int32(lines - 1), cp.int32(nn - 1), cp.int32(48)))

    iters = 20000  # planted: 1.25 waves of `iters`; fixed: 1 wave of 1.25 x iters
    planted_blocks = sms + sms // 4
    w_out = cp.empty(planted_blocks * 1024, dtype=cp.float32)
    add("planted_tail_wave", (planted_blocks,), (1024,), (w_out, cp.int32(iters)), TAIL_SMEM)
    add("fixed_tail_wave", (sms,), (1024,),
        (w_out, cp.int32(iters * planted_blocks // sms)), TAIL_SMEM)
    cp.cuda.Device().synchronize()
    return launches


def launch(l: dict[str, Any]) -> None:
    l["kernel"](tuple(l["grid"]), tuple(l["block"]), l["args"], shared_mem=l["smem"])


def time_all(cp: Any, launches: list[dict[str, Any]], reps: int, inner: int) -> list[dict[str, Any]]:
    out = []
    for l in launches:
        for _ in range(3):
            launch(l)
        per: list[float] = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            for _ in range(inner):
                launch(l)
            b.record()
            b.synchronize()
            per.append(cp.cuda.get_elapsed_time(a, b) / inner)
        out.append({k: v for k, v in l.items() if k not in ("kernel", "args")}
                   | {"ms": statistics.median(per), "ms_all": per})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time", metavar="OUT_JSON", help="time every kernel; write the results")
    ap.add_argument("--once", action="store_true", help="launch each kernel once (for ncu)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20)
    args = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("planted.py needs CuPy and an NVIDIA GPU", file=sys.stderr)
        return 2
    launches = build(cp)
    if args.once:
        for l in launches:
            launch(l)
        cp.cuda.Device().synchronize()
    if args.time:
        rows = time_all(cp, launches, args.reps, args.inner)
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        meta = {"device": props["name"].decode(), "sms": int(dev.attributes["MultiProcessorCount"]),
                "driver": cp.cuda.runtime.driverGetVersion(), "cupy": cp.__version__}
        with open(args.time, "w") as f:
            json.dump({"meta": meta, "kernels": rows}, f, indent=1)
        for r in rows:
            print(f"{r['name']:26s} {r['ms']:9.4f} ms")
        by = {r["name"]: r["ms"] for r in rows}
        for p in PAIRS:
            base, fix = by[f"planted_{p}"], by[f"fixed_{p}"]
            print(f"{p:16s} planted {base:.4f} fixed {fix:.4f} saving {100 * (1 - fix / base):5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
