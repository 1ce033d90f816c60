"""Capture overhead: step time with capture / without, same process, interleaved, medians.

Workloads (CUDA):
  gpt     a GPT-style decoder (bf16 autocast, AdamW, loss read each step) sized to ~25 ms/step
  gpt-log10  the same step with the loss read every 10th step only (as a loop that logs every N
          steps), so that the host can run ahead of the GPU between reads
  gpt-wide   a wider, shallower decoder (width 2048, 4 layers; loss read each step) sized to the
          same step time: about half the CUDA calls per ms of GPU work
  launch  a launch-bound loop: 2000 tiny kernels per step
  rnn     launch-heavy: an LSTM cell in small ops, 100 time steps (capture/workloads.py)
  conv    GPU-bound: an fp32 conv net sized to ~25 ms/step (capture/workloads.py)

Configurations (each in its own process: one CUPTI client per process):
  stepscope            stepscope.record(), default backend (CUPTI through the C shim, filtered
                       runtime/driver calls through CUPTI's callbacks, no synchronization
                       records, records kept raw and decoded at merge, psutil/NVML samplers in
                       their own process, stack sampler on)
  stepscope-attached   the default, but CUPTI is left attached after each capture instead of
                       detached (STEPSCOPE_CUPTI_DETACH=0, as stepscope did before)
  stepscope-prev       the default of another stepscope source tree (--prev-src DIR, put first on
                       PYTHONPATH): the code before a change, measured side by side
  stepscope-thread     the same with the psutil/NVML samplers in a thread of the profiled process
                       (STEPSCOPE_SAMPLER_PROCESS=0: how it was before 2026-11-22 09:30 UTC)
  stepscope-activity   the default before 2026-11-25's fifth session: the kept runtime/driver
                       calls through CUPTI's activity kinds instead of its callbacks, and
                       CUPTI's synchronization records on (STEPSCOPE_CUPTI_API_VIA=activity,
                       STEPSCOPE_CUPTI_SYNC=1)
  stepscope-kernels    the same with --gpu-api none (no runtime/driver call records)
  stepscope-nodriver   the default with no driver-API records in this torch process
                       (STEPSCOPE_TORCH_DRIVER_CALLS=""; by default cuLaunchKernel/Ex are kept)
  stepscope-host       host capture only (--backend none): step hooks, psutil/NVML samplers,
                       stack sampler
  stepscope-host-thread  the same, samplers in a thread (STEPSCOPE_SAMPLER_PROCESS=0)
  stepscope-gpu        GPU capture only (default backend and API calls; samplers off:
                       sample_hz=0, no stacks)
  stepscope-bare       stepscope's CUPTI capture alone (CuptiCapture, default settings), started
                       and stopped as torch.profiler is: no session, no step boundaries, no
                       host capture; records kept raw, CUPTI detached after it
  stepscope-bare-allapi  the same with a kind set like torch.profiler's (kernels, copies,
                       memsets, overhead, every runtime and driver call; no sync or NVTX records)
  stepscope-bare-prepared  stepscope-bare, the capture object made on another thread first (as
                       the session makes it, off the training thread)
  stepscope-gpu-nomark stepscope-gpu without step boundaries inside the timed block (the window
                       opens before it and closes after it)
  stepscope-cuptipy    stepscope.record(backend="cupti-python")
  stepscope-torch      stepscope.record(backend="torch")
  torch-cpu-cuda       torch.profiler, activities CPU+CUDA
  torch-cuda           torch.profiler, activities CUDA only

In each process: R rounds; each round times one block of M uncaptured steps and one block of M
captured steps, the order alternating (ABBA). M is the number of plain steps that fill
``--window-s`` seconds (at least ``--steps``): a captured block is a whole capture window, long
enough (default 5.5 s) to hold the periodic flush stepscope makes every 5 s while a window is
open, so that what a flush costs the program is inside the timing as it is in a real capture.
Capture starts before and stops after the timed block (a warm-up step is run inside the capture
first, as torch.profiler's schedule does); the device is synchronised at block edges only. Two
figures per process: ``ratio`` = median(captured block means) / median(plain block means), and
``paired_ratio`` = median over rounds of (captured block mean / the plain block mean of the same
round): the paired figure is the headline, as the host's speed drifts by up to ±20% over
seconds on the GPU machines used (docs/benchmarks.md), which adjacent blocks share. The summary
pools every paired ratio of a configuration over its processes (median, min, max).

``first_pair_ratio``: the first captured block over the plain block before it, the only plain
block that ran before any capture. It is the fair figure for a profiler that leaves CUPTI
attached after its capture: torch.profiler (PyTorch 2.11) does, so its later plain blocks run
with CUPTI's hooks, slower, and its later ratios read low (measured on the H100 2026-11-24/25:
plain blocks after its first capture 0.5-6% slower on the GPT step, up to 38% on the launch
loop; docs/benchmarks.md). ``--rounds 1 --processes N`` measures exactly that pair, N times.

    python benchmarks/overhead.py --out overhead.json [--workloads gpt launch] [--configs ...]
        [--rounds R] [--window-s S] [--steps M] [--processes P] [--prev-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONFIGS = ("stepscope", "stepscope-attached", "stepscope-prev", "stepscope-thread",
           "stepscope-activity", "stepscope-kernels", "stepscope-nodriver", "stepscope-host",
           "stepscope-host-thread",
           "stepscope-gpu", "stepscope-gpu-nomark", "stepscope-bare", "stepscope-bare-allapi",
           "stepscope-bare-prepared", "stepscope-bare-nocopy", "stepscope-bare-kernels",
           "stepscope-cuptipy",
           "stepscope-torch", "torch-cpu-cuda", "torch-cuda")
# configurations whose setting holds for the whole process (an environment variable read once,
# another source tree): never mixed with others in one process (mixed.py, paired.py)
PROCESS_WIDE = ("stepscope-attached", "stepscope-prev", "stepscope-thread", "stepscope-host-thread",
                "stepscope-nodriver")


def gpt_step(target_ms: float, batch: int = 0, loss_every: int = 1, d: int = 1024, layers: int = 8
             ) -> tuple[Callable[[], None], int]:
    """A GPT-style bf16 training step (width ``d``, ``layers`` blocks) and its batch size
    (``batch`` 0: the smallest reaching ``target_ms``); the loss is read on the host (a device
    sync) every ``loss_every`` steps."""
    import itertools

    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    heads, seq, vocab = 16, 1024, 32000

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.head = torch.nn.Linear(d, vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.emb(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.head(x)

    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def make(batch: int) -> Callable[[], None]:
        idx = torch.randint(0, vocab, (batch, seq), device="cuda")
        count = itertools.count(1)

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(idx)
                loss = F.cross_entropy(logits.view(-1, vocab).float(), idx.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if next(count) % loss_every == 0:
                loss.item()

        return step

    for batch in ((batch,) if batch else (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)):  # smallest reaching
        fn = make(batch)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        if ms >= target_ms:
            break
    print(f"gpt: batch {batch}, {ms:.1f} ms/step", file=sys.stderr)
    return fn, batch


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def launch_step(kernels: int = 2000) -> Callable[[], None]:
    import torch

    # on a machine without CUDA (a smoke test of this script) the loop runs on the CPU
    x = torch.zeros(256, device="cuda" if torch.cuda.is_available() else "cpu")

    def step() -> None:
        for _ in range(kernels):
            x.add_(1.0)

    return step


def settle() -> None:
    """Before every timed block: what the previous block left behind (freed tables, a thread
    finishing, the sampler process exiting) is done before the clock starts, for both kinds."""
    import gc


    gc.collect()
    sync()
    time.sleep(0.1)


def make_workload(workload: str, target_ms: float = 25.0, batch: int = 0
                  ) -> tuple[Callable[[], None], int]:
    """The step of ``workload`` (one of ``WORKLOADS``) and the GPT batch size (0 for the loop)."""
    if workload == "gpt-wide":
        return gpt_step(target_ms, batch, d=2048, layers=4)
    if workload.startswith("gpt"):
        return gpt_step(target_ms, batch, loss_every=10 if workload == "gpt-log10" else 1)
    if workload in ("rnn", "conv"):  # issue 17's two programs: benchmarks/capture/workloads.py
        import importlib.util

        path = Path(__file__).resolve().parent / "capture" / "workloads.py"
        spec = importlib.util.spec_from_file_location("stepscope_bench_workloads", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return (mod.rnn_step(), 0) if workload == "rnn" else mod.conv_step(target_ms, batch)
    return launch_step(), 0


def steps_for(step: Callable[[], None], seconds: float, minimum: int) -> int:
    """Warm the step up (5 runs), time 10 more, and say how many fill ``seconds`` (at least
    ``minimum``; ``seconds`` <= 0: ``minimum``)."""
    for _ in range(5):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(10):
        step()
    sync()
    per_s = (time.perf_counter() - t0) / 10
    return max(minimum, round(seconds / per_s)) if seconds > 0 else minimum


def time_steps(step: Callable[[], None], n: int, between: Callable[[], None] | None = None
               ) -> tuple[float, list[float]]:
    """Run ``n`` steps (``between`` after each but the last), device synchronised at the end.
    Returns ms per step and the block's trace: ms since its start at the end of every 10th."""
    t0 = time.perf_counter()
    marks = []
    for j in range(n):
        step()
        if between is not None and j < n - 1:
            between()
        if j % 10 == 9:
            marks.append(round((time.perf_counter() - t0) * 1e3, 2))
    sync()
    return (time.perf_counter() - t0) / n * 1e3, marks


def captured_block(config: str, step: Callable[[], None], steps: int, run: Path
                   ) -> tuple[float, list[float]]:
    """One captured block under ``config`` (a torch.profiler or stepscope configuration of
    ``CONFIGS``): capture started, a warm-up step, ``steps`` timed steps, capture stopped (and
    its GPU records kept, outside the timing). Returns ms per step and the per-block trace (ms
    since the block's start at the end of every 10th step)."""
    import torch

    import stepscope

    if config.startswith("torch-"):
        acts = [torch.profiler.ProfilerActivity.CUDA]
        if config == "torch-cpu-cuda":
            acts.insert(0, torch.profiler.ProfilerActivity.CPU)
        prof = torch.profiler.profile(activities=acts)
        settle()
        prof.start()
        step()  # warm-up step inside the capture
        ms, marks = time_steps(step, steps)
        prof.stop()  # its trace is not exported: outside the timing either way, and slow
        del prof
        return ms, marks
    if config.startswith("stepscope-bare"):
        from stepscope.capture.cupti.capture import CuptiCapture
        from stepscope.capture.cupti.settings import GpuSettings

        gs = {"stepscope-bare-allapi": GpuSettings(api="all", sync=False, nvtx=False, driver=True),
              # what the copy/memset kinds cost where the program makes no copy (they hook calls)
              "stepscope-bare-nocopy": GpuSettings(memcpy=False, memset=False),
              # the floor: kernel records alone
              "stepscope-bare-kernels": GpuSettings(api="none", memcpy=False, memset=False,
                                                    nvtx=False, overhead=False),
              }.get(config, GpuSettings())
        if config == "stepscope-bare-prepared":  # made off the main thread, as the session does
            made: list[CuptiCapture] = []
            t = threading.Thread(target=lambda: made.append(
                CuptiCapture(gs, spill_dir=run / "spill")), name="stepscope-gpu-prepare")
            t.start()
            t.join()
            cap = made[0]
        else:
            cap = CuptiCapture(gs, spill_dir=run / "spill")
        settle()
        cap.start()
        step()  # warm-up step inside the capture, as for torch.profiler
        ms, marks = time_steps(step, steps)
        cap.stop()  # records kept raw in the spill folder, outside the timing; detach armed
        return ms, marks
    backend = {"stepscope-cuptipy": "cupti-python", "stepscope-torch": "torch",
               "stepscope-host": "none", "stepscope-host-thread": "none"}.get(config, "auto")
    api = "none" if config == "stepscope-kernels" else "filtered"
    host = config not in ("stepscope-gpu", "stepscope-gpu-nomark")
    nomark = config == "stepscope-gpu-nomark"  # no boundary inside the timed block
    knobs = {"STEPSCOPE_CUPTI_API_VIA": "activity", "STEPSCOPE_CUPTI_SYNC": "1"}
    saved = {k: os.environ.pop(k, None) for k in knobs}
    if config == "stepscope-activity":
        os.environ.update(knobs)
    try:
        return _recorded_block(stepscope, run, steps, step, backend, api, host, nomark)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def _recorded_block(stepscope: Any, run: Path, steps: int, step: Callable[[], None], backend: str,
                    api: str, host: bool, nomark: bool) -> tuple[float, list[float]]:
    with stepscope.record(run, steps=f"2-{steps + 1}", backend=backend, gpu_api=api, hooks=False,
                          overwrite=True, sample_hz=10.0 if host else 0.0, stacks=host) as r:
        for _ in range(2):  # boundaries 0 and 1; the GPU capture starts at 1
            step()
            r.step()
        step()  # warm-up step inside the GPU capture, as for torch.profiler (from 2026-11-25)
        settle()
        r.step()  # boundary 2: the window opens
        ms, marks = time_steps(step, steps, between=None if nomark else r.step)
        r.step()  # the window closes (GPU records kept, outside the timing)
    return ms, marks


def run_one(workload: str, config: str, rounds: int, steps: int, target_ms: float,
            batch: int = 0, window_s: float = 0.0) -> dict[str, Any]:

    import stepscope

    if config == "stepscope-nodriver":
        os.environ["STEPSCOPE_TORCH_DRIVER_CALLS"] = ""
    if config.endswith("-thread"):
        os.environ["STEPSCOPE_SAMPLER_PROCESS"] = "0"
    if config == "stepscope-attached":
        os.environ["STEPSCOPE_CUPTI_DETACH"] = "0"
    step, batch = make_workload(workload, target_ms, batch)
    steps = steps_for(step, window_s, steps)
    tmp = Path(tempfile.mkdtemp(prefix="ss-overhead-"))

    traces: list[list[float]] = []  # per block: ms from its start at the end of every 10th step

    def plain() -> float:
        settle()
        ms, marks = time_steps(step, steps)
        traces.append(marks)
        return ms

    def captured(i: int) -> float:
        ms, marks = captured_block(config, step, steps, tmp / f"r{i}")
        traces.append(marks)
        return ms

    a: list[float] = []
    b: list[float] = []
    kinds: list[str] = []  # of the blocks, in the order they ran (one trace each)
    for i in range(rounds):
        for kind in (("plain", "captured") if i % 2 == 0 else ("captured", "plain")):
            if kind == "plain":
                a.append(plain())
            else:
                b.append(captured(i))
            kinds.append(kind)
    # plain blocks right after a captured one (odd rounds) vs after a plain one: a difference
    # would be work a capture leaves behind
    after_capture = [x for i, x in enumerate(a) if i % 2 == 1]
    after_plain = [x for i, x in enumerate(a) if i % 2 == 0 and i > 0]
    out = {"workload": workload, "config": config, "batch": batch, "steps_per_block": steps,
           "stepscope": str(Path(stepscope.__file__).parent), "plain_ms": a, "captured_ms": b,
           "plain_after_capture_median_ms": statistics.median(after_capture) if after_capture else None,
           "plain_after_plain_median_ms": statistics.median(after_plain) if after_plain else None,
           "plain_median_ms": statistics.median(a), "captured_median_ms": statistics.median(b),
           # per block, in the order they ran: ms since its start at the end of every 10th step
           "traces_ms": [{"kind": k, "ms": t} for k, t in zip(kinds, traces)],
           "ratio": statistics.median(b) / statistics.median(a),
           "first_pair_ratio": b[0] / a[0],
           "paired_ratio": statistics.median(y / x for x, y in zip(a, b))}
    if not config.startswith("torch-"):
        runs = sorted(tmp.glob("r*/manifest.json"))
        if runs:
            m = json.loads(runs[-1].read_text())
            ranks = m.get("settings", {}).get("ranks", {})
            out["gpu"] = {k: (v or {}).get("gpu") for k, v in ranks.items()}
            out["capture_overhead"] = m.get("overhead")
            out["diagnostics"] = [d.get("message") for d in m.get("diagnostics", [])]
    return out


WORKLOADS = ("gpt", "gpt-log10", "gpt-wide", "launch", "rnn", "conv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="overhead.json")
    ap.add_argument("--workloads", nargs="+", default=["gpt", "launch"], choices=WORKLOADS)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="at least this many steps per block")
    ap.add_argument("--window-s", type=float, default=5.5,
                    help="seconds of plain steps per block (0: --steps alone)")
    ap.add_argument("--prev-src", default="",
                    help="a stepscope source tree (its src/ folder) for stepscope-prev")
    ap.add_argument("--processes", type=int, default=1,
                    help="processes per configuration (order of configurations alternating)")
    ap.add_argument("--target-ms", type=float, default=25.0)
    ap.add_argument("--gpt-batch", type=int, default=0,
                    help="GPT batch size (0: the smallest reaching --target-ms, found once by a "
                         "probe process and given to every process)")
    ap.add_argument("--one", nargs=2, metavar=("WORKLOAD", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        if args.one[1] == "probe":
            print("RESULT " + json.dumps({"batch": make_workload(args.one[0], args.target_ms)[1]}))
            return
        res = run_one(args.one[0], args.one[1], args.rounds, args.steps, args.target_ms,
                      args.gpt_batch, args.window_s)
        print("RESULT " + json.dumps(res))
        return
    if "stepscope-prev" in args.configs and not args.prev_src:
        ap.error("stepscope-prev needs --prev-src")
    # one batch for every process, and for gpt and gpt-log10: the same step, with and without
    # the host sync of each step's loss read (gpt-wide is another model, with its own batch)
    gpts = [w for w in args.workloads if w.startswith("gpt")]
    if len({w == "gpt-wide" for w in gpts}) > 1:
        ap.error("gpt-wide has its own batch: run it apart from the other GPT workloads")
    if gpts and not args.gpt_batch:
        first = gpts[0]
        probe = subprocess.run([sys.executable, __file__, "--one", first, "probe",
                                "--target-ms", str(args.target_ms)], capture_output=True, text=True)
        line = next((x for x in probe.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"gpt batch probe failed: {probe.stderr.strip()[-500:]}")
        args.gpt_batch = int(json.loads(line[7:])["batch"])
        print(f"gpt batch {args.gpt_batch}", flush=True)
    results = []
    for w in args.workloads:
        for p in range(args.processes):
            order = args.configs if p % 2 == 0 else list(reversed(args.configs))
            for c in order:
                cmd = [sys.executable, __file__, "--one", w, c, "--rounds", str(args.rounds),
                       "--steps", str(args.steps), "--target-ms", str(args.target_ms),
                       "--gpt-batch", str(args.gpt_batch), "--window-s", str(args.window_s)]
                env = dict(os.environ)
                if c == "stepscope-prev":
                    env["PYTHONPATH"] = os.pathsep.join(
                        x for x in (str(Path(args.prev_src).resolve()), env.get("PYTHONPATH")) if x)
                t0 = time.time()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    res = {"workload": w, "config": c,
                           "error": (proc.stderr.strip().splitlines() or ["?"])[-3:]}
                else:
                    res = json.loads(line[7:])
                res["process"] = p
                res["process_s"] = round(time.time() - t0, 1)
                results.append(res)
                r = res.get("ratio")
                print(f"{w:7s} {c:21s} p{p} " + (
                    f"plain {res['plain_median_ms']:8.3f} ms  captured "
                    f"{res['captured_median_ms']:8.3f} ms  ratio {r:.3f}  paired "
                    f"{res['paired_ratio']:.3f}"
                    if r else f"error {res.get('error')}"), flush=True)
                Path(args.out).write_text(json.dumps({"results": results}, indent=1))
    summary = {}
    for w in args.workloads:
        for c in args.configs:
            done = [r for r in results if r["workload"] == w and r["config"] == c and "ratio" in r]
            if done:
                rs = [r["ratio"] for r in done]
                ps = [r["paired_ratio"] for r in done]
                pooled = [y / x for r in done for x, y in zip(r["plain_ms"], r["captured_ms"])]
                firsts = [r["first_pair_ratio"] for r in done]
                summary[f"{w}/{c}"] = {
                    "median_first_pair_ratio": round(statistics.median(firsts), 4),
                    "first_pair_ratios": [round(x, 4) for x in firsts],
                    "median_of_process_paired_ratios": round(statistics.median(ps), 4),
                    "pooled_paired_ratio": round(statistics.median(pooled), 4),
                    "pooled_paired_min_max": [round(min(pooled), 4), round(max(pooled), 4)],
                    "pairs": len(pooled),
                    "median_of_process_ratios": round(statistics.median(rs), 4),
                    "process_paired_ratios": [round(x, 4) for x in ps],
                    "process_ratios": [round(x, 4) for x in rs]}
                print(f"{w:7s} {c:21s} over {len(done)} processes: paired {statistics.median(ps):.3f} "
                      f"{[round(x, 3) for x in ps]}  pooled paired {statistics.median(pooled):.3f} "
                      f"[{min(pooled):.3f}, {max(pooled):.3f}] ({len(pooled)} pairs)  "
                      f"ratio {statistics.median(rs):.3f}  first pairs {statistics.median(firsts):.3f} "
                      f"{[round(x, 3) for x in firsts]}", flush=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "results": results}, indent=1))

if __name__ == "__main__":
    main()
