"""HTML report benchmark: generation time and size for a run with N GPU events, and in Chromium
first render and per-frame zoom / pan cost.

    PYTHONPATH=src python benchmarks/report_html.py --gpu-events 200000 --browser

The run is synthetic (numpy, written through the store writer) and shaped like a real
training trace: per step a data-loader wait, an HtoD copy, ``K`` kernels each launched by a
``cudaLaunchKernel`` inside an ``aten::`` op, a memset, Python frames around groups of ops,
a ``cudaStreamSynchronize`` at the end of the step, allocator events and sampled metrics.
Per GPU event there are about 2 host events, so 200k GPU events make ~620k events in all.

Targets (docs/benchmarks.md, "HTML report"): generation <= 3 s and HTML <= 10 MB at 200k GPU
events; in Chromium, first render <= 2 s and a zoom or pan frame <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.reporters.html import render_html
from stepscope.reporters.report import build_report
from stepscope.reporters.timeline_build import build_page
from stepscope.store.manifest import Manifest, RankInfo, SourceInfo
from stepscope.store.run import Run
from stepscope.store.writer import write_run

H100 = {"name": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", "compute_major": 9, "compute_minor": 0,
            "sm_count": 132, "warp_size": 32, "max_threads_per_block": 1024, "max_threads_per_sm": 2048,
            "regs_per_block": 65536, "regs_per_sm": 65536, "smem_per_block": 49152,
            "smem_per_block_optin": 232448, "smem_per_sm": 233472, "total_memory": 85017493504}
KERNELS = ["ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
           "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
           "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
           "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>",
           "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false>>",
           "void at::native::unrolled_elementwise_kernel<at::native::AddFunctor<float>>",
           "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
           "void at::native::softmax_warp_forward<float, float, float, 10, false>"]
OPS = ["aten::mm", "aten::gelu", "aten::sum", "aten::layer_norm", "aten::_flash_attention_forward",
       "aten::add", "aten::addmm", "aten::_softmax"]


def make_run(path: Path, gpu_events: int = 200_000, per_step: int = 1000, seed: int = 0) -> Run:
    rng = np.random.default_rng(seed)
    n_steps = max(1, gpu_events // (per_step + 10))
    n_k = n_steps * per_step
    step_ns = 25_000_000
    t0 = 1_700_000_000_000_000_000
    st = t0 + np.arange(n_steps, dtype=np.int64) * (step_ns + 200_000)
    # kernels: back to back with small gaps, launched ~20 us earlier from inside an aten op
    which = rng.integers(0, len(KERNELS), n_k)
    kdur = rng.integers(2_000, 40_000, n_k).astype(np.int64)
    gaps = rng.integers(500, 6_000, n_k).astype(np.int64)
    within = np.cumsum(kdur + gaps).reshape(n_steps, per_step)
    within = within - within[:, :1] + 600_000
    kts = (st[:, None] + within).reshape(-1) - kdur
    corr = np.arange(1, n_k + 1, dtype=np.int64)
    launch_ts = kts - rng.integers(15_000, 30_000, n_k)
    op_ts = launch_ts - 4_000
    kernels = {"ts_ns": kts, "dur_ns": kdur, "device": np.zeros(n_k, np.int32), "stream": np.full(n_k, 7),
                   "correlation": corr, "name": np.array(KERNELS, dtype=object)[which],
                   "grid_x": rng.choice([16, 132, 264, 1024, 8192], n_k), "grid_y": np.ones(n_k, np.int32),
                   "grid_z": np.ones(n_k, np.int32), "block_x": rng.choice([128, 256, 384], n_k),
                   "block_y": np.ones(n_k, np.int32), "block_z": np.ones(n_k, np.int32),
                   "registers": rng.choice([32, 64, 128, 168], n_k), "shared_memory": rng.choice([0, 49152], n_k)}
    api = {"ts_ns": np.r_[launch_ts, st + step_ns - 300_000], "dur_ns": np.r_[np.full(n_k, 6_000), np.full(n_steps, 250_000)],
               "pid": np.full(n_k + n_steps, 1), "tid": np.full(n_k + n_steps, 1), "correlation": np.r_[corr, np.zeros(n_steps, np.int64)],
               "name": np.array(["cudaLaunchKernel"] * n_k + ["cudaStreamSynchronize"] * n_steps, dtype=object),
               "kind": np.array(["launch"] * n_k + ["sync"] * n_steps, dtype=object)}
    # python frames: one per 8 ops, spanning them
    grp = np.arange(n_k) // 8
    py_s = np.minimum.reduceat(op_ts, np.flatnonzero(np.r_[True, grp[1:] != grp[:-1]])) - 2_000
    py_e = np.maximum.reduceat(launch_ts + 6_000, np.flatnonzero(np.r_[True, grp[1:] != grp[:-1]])) + 2_000
    n_py = py_s.size
    cpu_ops = {"ts_ns": np.r_[op_ts, py_s], "dur_ns": np.r_[np.full(n_k, 12_000), py_e - py_s],
                   "pid": np.ones(n_k + n_py, np.int64), "tid": np.ones(n_k + n_py, np.int64),
                   "name": np.r_[np.array(OPS, dtype=object)[which], np.array([f"model.py({i % 50 + 10}): forward" for i in range(n_py)], dtype=object)],
                   "kind": np.array(["framework"] * n_k + ["python"] * n_py, dtype=object)}
    n_m = n_steps * 5
    mts = (st[:, None] + np.array([100_000, 200_000, 300_000, 400_000, 500_000])).reshape(-1)
    memcpy = {"ts_ns": mts, "dur_ns": np.full(n_m, 40_000), "device": np.zeros(n_m, np.int32), "stream": np.full(n_m, 8),
                  "kind": np.array(["HtoD"] * n_m, dtype=object), "bytes": np.full(n_m, 4 << 20),
                  "src_kind": np.array(["pinned"] * n_m, dtype=object), "dst_kind": np.array(["device"] * n_m, dtype=object),
                  "correlation": np.arange(n_k + 1, n_k + 1 + n_m)}
    n_s = n_steps * 5
    sts = (st[:, None] + step_ns - np.array([900_000, 800_000, 700_000, 600_000, 500_000])).reshape(-1)
    memset = {"ts_ns": sts, "dur_ns": np.full(n_s, 3_000), "device": np.zeros(n_s, np.int32), "stream": np.full(n_s, 8),
                  "bytes": np.full(n_s, 4096), "correlation": np.arange(n_k + n_m + 1, n_k + n_m + 1 + n_s)}
    steps = {"ts_ns": st, "dur_ns": np.full(n_steps, step_ns), "step": np.arange(n_steps),
                 "source": np.array(["profiler_step"] * n_steps, dtype=object),
                 "name": np.array([f"ProfilerStep#{i}" for i in range(n_steps)], dtype=object)}
    waits = {"ts_ns": st + 10_000, "dur_ns": np.full(n_steps, 80_000), "pid": np.ones(n_steps, np.int64),
                 "tid": np.ones(n_steps, np.int64), "source": np.array(["dataloader"] * n_steps, dtype=object),
                 "name": np.array(["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] * n_steps, dtype=object)}
    n_mem = n_k // 2
    mem_ts = np.sort(rng.integers(int(st[0]), int(st[-1] + step_ns), n_mem))
    alloc = (2e9 + 1e9 * np.sin(np.arange(n_mem) / 500.0)).astype(np.int64)
    memory = {"ts_ns": mem_ts, "pid": np.ones(n_mem, np.int64), "tid": np.ones(n_mem, np.int64),
                  "device_type": np.array(["gpu"] * n_mem, dtype=object), "device": np.zeros(n_mem, np.int32),
                  "bytes": np.full(n_mem, 1 << 20), "total_allocated": alloc, "total_reserved": np.full(n_mem, 4_000_000_000)}
    n_smp = max(10, (n_steps * step_ns) // 10_000_000)
    smp_ts = np.linspace(st[0], st[-1] + step_ns, n_smp).astype(np.int64)
    samples = {"ts_ns": np.r_[smp_ts, smp_ts], "device": np.r_[np.zeros(n_smp), np.full(n_smp, None)],
                   "metric": np.array(["gpu.sm_util"] * n_smp + ["cpu.util"] * n_smp, dtype=object),
                   "value": np.r_[rng.uniform(60, 100, n_smp), rng.uniform(10, 40, n_smp)],
                   "unit": np.array(["%"] * (2 * n_smp), dtype=object)}
    tables: dict[str, Any] = {"kernels": kernels, "api_calls": api, "cpu_ops": cpu_ops, "memcpy": memcpy, "memset": memset,
                                  "steps": steps, "input_waits": waits, "memory_events": memory, "samples": samples,
                                  "devices": {k: [v] for k, v in {**H100, "device": 0}.items()},
                                  "threads": {"pid": [1], "tid": [1], "name": ["thread 1 (python)"]},
                                  "streams": {"device": [0, 0], "stream": [7, 8], "name": ["stream 7", "stream 8 (copies)"]}}
    manifest = Manifest(source=SourceInfo(kind="synthetic", tool="benchmarks/report_html.py"),
                        ranks=(RankInfo(rank=0),))
    write_run(path, manifest, [(0, tables)], overwrite=True)
    return Run(path)


BROWSER_JS = """async () => {
  const H = window.__stepscope, tl = H.timeline, out = {first_render_ms: H.firstRenderMs, decode_ms: H.decodeMs, timings: H.timings};
  const cv = tl.canvas, r = cv.getBoundingClientRect();
  const frames = [];
  const frame = (fn) => { fn(); const t = performance.now(); tl.draw(); frames.push(performance.now() - t); };
  const x = r.left + tl.gutter + tl.plotW / 2, y = r.top + 60;
  const wheel = (dy) => cv.dispatchEvent(new WheelEvent('wheel', {deltaY: dy, clientX: x, clientY: y, bubbles: true, cancelable: true}));
  const zoom = [], pan = [];
  for (let i = 0; i < 25; i++) { frame(() => wheel(-120)); zoom.push(frames[frames.length - 1]); }
  for (let i = 0; i < 25; i++) { frame(() => wheel(120)); zoom.push(frames[frames.length - 1]); }
  for (const level of [1, 0.2, 0.02, 0.002]) {
    const span = tl.ev.endUs * level;
    for (let i = 0; i < 10; i++) {
      frame(() => { const s0 = tl.ev.endUs * 0.3 + i * span * 0.05; tl.view = {s: s0, e: s0 + span}; });
      pan.push(frames[frames.length - 1]);
    }
  }
  out.zoom_ms = zoom; out.pan_ms = pan; out.events = tl.ev.n;
  return out;
}"""


def browser(html: Path, loads: int = 3) -> dict[str, Any]:
    """Load the report ``loads`` times in fresh pages (median first render), then zoom and pan."""
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    firsts, res = [], {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        for _ in range(loads):
            page = b.new_page(viewport={"width": 1440, "height": 900})
            page.goto(html.as_uri())
            page.wait_for_function("() => window.__stepscope && window.__stepscope.ready",
                                   timeout=60_000)
            res = page.evaluate(BROWSER_JS)
            firsts.append(res["first_render_ms"])
            page.close()
        res["chromium"] = b.version
        b.close()
    res["first_render_ms_all"] = firsts
    res["first_render_ms"] = statistics.median(firsts)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-events", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3, help="generation runs (median reported)")
    ap.add_argument("--browser", action="store_true", help="also measure in headless Chromium")
    ap.add_argument("--keep", type=Path, help="folder to keep the run and report.html in")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="stepscope-html-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    run = make_run(work / "run", a.gpu_events)
    gens, reps = [], []
    for _ in range(a.repeat):
        run = Run(run.path)  # cold table cache each time
        t = time.perf_counter()
        report = build_report(run)
        t1 = time.perf_counter()  # the page (timeline payload, kernel table) counts as HTML
        out = render_html(replace(report, page=build_page(run, report.analysis)))
        t2 = time.perf_counter()
        reps.append(t1 - t)
        gens.append(t2 - t1)
    html = work / "report.html"
    html.write_text(out.text, encoding="utf-8")
    res: dict[str, Any] = {
        "gpu_events": a.gpu_events, "timeline_events": out.timeline.events,
        "analysis_s": statistics.median(reps), "html_s": statistics.median(gens),
        "total_s": statistics.median(reps) + statistics.median(gens),
        "html_mb": len(out.text.encode()) / 1e6, "payload_raw_mb": out.timeline.raw_bytes / 1e6,
        "payload_zlib_mb": len(out.timeline.blob) / 1e6,
    }
    if a.browser:
        b = browser(html)
        res.update(first_render_ms=b["first_render_ms"], first_render_ms_all=b["first_render_ms_all"],
                   decode_ms=b["decode_ms"],
                   browser_timings_ms={k: round(v, 1) for k, v in b["timings"].items()},
                   chromium=b["chromium"], zoom_frame_ms_median=statistics.median(b["zoom_ms"]),
                   zoom_frame_ms_max=max(b["zoom_ms"]), pan_frame_ms_median=statistics.median(b["pan_ms"]),
                   pan_frame_ms_max=max(b["pan_ms"]))
    res["cpu"] = subprocess.run(["sh", "-c", "nproc; grep -m1 'model name' /proc/cpuinfo"],
                                capture_output=True, text=True, check=False).stdout.strip().replace("\n", " · ")
    sys.stdout.write(json.dumps(res, indent=2) + "\n")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
