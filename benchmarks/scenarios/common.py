"""Harness for the planted-bottleneck scenarios: build, time A/B interleaved, trace, advise.

A scenario module defines::

    EXPECTED = "input_bound"      # rule id that must be ranked first ("" for the healthy run)
    DESCRIPTION = "..."           # one line: what is planted, what the fix is
    def build(fixed: bool, device: str) -> Step | Callable[[], None]

``build`` does all the setup (model, data, loaders, CUDA graphs, CuPy kernels) and returns
something that runs ONE training step when called. It raises :class:`SkipScenario` when the
device cannot run it (e.g. CUDA-only scenarios on ``--device cpu``). Optional declarations
(``FRAMEWORK``, ``STEP_HOOK``, ``TABLE``, ``PROGRAM_STEPS``/``PROGRAM_SECONDS``) are read by
``timing.ScenarioMeta``; JAX and CuPy scenarios import ``timing`` (torch-free) instead of this
module and give their ``Step`` a ``sync``.

Measurement rules (see ../../../shared/guide/DEVICE.md: step times drift from process to
process): baseline and fixed are built in the same process and timed interleaved, R rounds x
(M steps baseline, M steps fixed) with the order alternating each round (ABBA...), a device
synchronize only at block boundaries, per-block mean step time, medians over blocks.

In-flight bound: every step run by the harness (timed or traced) is followed by a recorded
CUDA event, and before a step starts the harness waits (``cudaEventSynchronize``) for the event
of the step ``inflight`` steps back (default 2). This keeps the host at most two steps ahead of
the GPU, as a full launch queue or a deferred loss read does in a long training run, so that the
profiler's ``ProfilerStep#N`` windows (host time) match GPU steps in a 9-step trace. When the
GPU is the bottleneck the wait overlaps GPU work (no GPU idle); when the host is, the event has
long completed and the wait returns at once. ``--inflight 0`` turns it off.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import os
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import torch
from timing import (
    CALIBRATIONS_ENV,
    PlainRunner,
    SkipScenario,
    Step,
    StepRunner,
    Timing,
    as_step,
    score,
    time_runners,
)
from trace_advice import advise_trace

__all__ = ["PlainRunner", "SkipScenario", "Step", "Timing", "advise_trace", "as_step",
           "score"]  # re-exported

# ---------------------------------------------------------------------------------------------
# Scenario vocabulary (SkipScenario, Step, as_step and Timing live in timing.py, torch-free for
# the JAX and CuPy scenarios, and are re-exported here)


def is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def require_cuda(device: str, what: str) -> None:
    if not is_cuda(device):
        raise SkipScenario(f"needs CUDA ({what})")


def sync(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


def pick(device: str, cuda: Any, cpu: Any) -> Any:
    """Size for the device: full size on CUDA, tiny on the CPU smoke path."""
    return cuda if is_cuda(device) else cpu


def num_sms(device: str) -> int:
    return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count \
        if is_cuda(device) else 1


def seeded(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def capture_graph(body: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    """``body`` run 3 times on a side stream (the warm-up the CUDA-graph docs ask for before a
    capture), then captured once: the graph and the output tensors it replays into. Grad mode
    is the caller's (wrap the call in ``torch.no_grad()`` for an inference graph)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = body()
    return graph, out


def randn(*shape: int, device: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Deterministic random tensor made on the CPU then moved (same data for both variants)."""
    return torch.randn(*shape, generator=seeded(seed), dtype=torch.float32).to(device=device,
                                                                               dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Model helpers shared by scenarios


def mlp(widths: list[int], device: str, *, act: type[torch.nn.Module] = torch.nn.GELU,
        seed: int = 0, dtype: torch.dtype = torch.float32, bias: bool = True
        ) -> torch.nn.Sequential:
    """Linear(w0,w1) act Linear(w1,w2) act ... Linear(w[-2],w[-1]); deterministic init;
    ``bias`` False: Linear layers without a bias."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(torch.nn.Linear(a, b, bias=bias))
        if i < len(widths) - 2:
            layers.append(act())
    return torch.nn.Sequential(*layers).to(device=device, dtype=dtype)


def adamw(model: torch.nn.Module, device: str, lr: float = 1e-4) -> torch.optim.Optimizer:
    """AdamW, fused on CUDA (one multi-tensor kernel per step, as a tuned job would use)."""
    if is_cuda(device):
        return torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    return torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)


def tf32_flags(tf32: bool) -> None:
    """TF32 on or off for matmuls and cuDNN through the legacy flags. They are process-global:
    each variant sets its own at the start of every step (the legacy API only: mixing it with
    ``fp32_precision`` raises in recent torch)."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def autocast(device: str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    if dtype is None:
        return contextlib.nullcontext()
    ctx: contextlib.AbstractContextManager[Any] = torch.autocast(
        device_type="cuda" if is_cuda(device) else "cpu", dtype=dtype)
    return ctx


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, *,
               device: str, amp: torch.dtype | None = None) -> torch.Tensor:
    """Forward, a mean-square loss, backward, optimizer step. Returns the loss (on device)."""
    with autocast(device, amp):
        out = model(x)
    loss = out.float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def precision_mlp(variant: str | None, device: str, sizes: tuple[int, int, int], *,
                  seed: int, flags: Callable[[bool], None], bias: bool = True) -> Step:
    """An fp32 MLP trained with fused AdamW (``mlp``, ``train_step``) of ``sizes`` ``(batch,
    width, layers)`` (picked by the scenario, whose ``pick`` ``host_floor_probe.py`` replaces
    for its tiny sizes), and its precision fix: ``variant`` "tf32" sets TF32 on
    through ``flags`` at the start of every step (off for the others), "bf16_amp" runs the step
    under bf16 autocast, None is the fp32 baseline (``fp32_no_tf32``, ``deep_mlp_fp32``,
    ``mlp_nobias_fp32`` with ``bias`` False)."""
    tf32 = variant == "tf32"
    amp = torch.bfloat16 if variant == "bf16_amp" else None
    batch, width, layers = sizes
    model = mlp([width] * (layers + 1), device, bias=bias)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=seed)

    def step() -> None:
        flags(tf32)
        train_step(model, opt, x, device=device, amp=amp)

    return Step(step, info={"batch": batch, "width": width, "layers": layers, "tf32": tf32,
                            "amp": str(amp) if amp else None, "bias": bias})


_CALIBRATIONS: dict[str, int] = {}




def calibrations() -> dict[str, int]:
    """The calibrations this process made (``calibrate``), for ``CALIBRATIONS_ENV``."""
    return dict(_CALIBRATIONS)


def calibrate(key: str, fn: Callable[[int], Any], target_ms: float, *, start: int = 1,
              limit: int = 1 << 26) -> int:
    """Smallest-ish ``n`` with ``fn(n)`` taking about ``target_ms`` on this host (cached per
    process, so baseline and fixed use the same ``n``). Doubling search then linear scale.
    ``$SCENARIO_CALIBRATIONS`` (JSON) gives ``n`` instead: the recorded program then runs the
    very work the timing child measured (a calibration made while the recorder starts up
    contends with it and plants less work)."""
    if key in _CALIBRATIONS:
        return _CALIBRATIONS[key]
    given = json.loads(os.environ.get(CALIBRATIONS_ENV) or "{}")
    if isinstance(given, dict) and isinstance(given.get(key), int):
        _CALIBRATIONS[key] = int(given[key])
        return _CALIBRATIONS[key]
    n = max(1, start)
    while True:
        fn(n)  # warm
        t0 = time.perf_counter()
        fn(n)
        ms = (time.perf_counter() - t0) * 1e3
        if ms >= target_ms / 4 or n >= limit:
            break
        n *= 2
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(n)
        best.append((time.perf_counter() - t0) * 1e3)
    ms = max(min(best), 1e-3)
    n = max(1, min(limit, round(n * target_ms / ms)))
    _CALIBRATIONS[key] = n
    return n


# ---------------------------------------------------------------------------------------------
# Running steps with a bounded number in flight


class Runner:
    """Calls a step, keeping at most ``inflight`` steps queued on the GPU (see module doc)."""

    def __init__(self, step: Step, device: str, inflight: int = 2) -> None:
        self.step = step
        self.cuda = is_cuda(device)
        self.inflight = inflight if self.cuda else 0
        self.events: deque[torch.cuda.Event] = deque()

    def __call__(self) -> None:
        if self.inflight > 0:
            while len(self.events) >= self.inflight:
                self.events.popleft().synchronize()
        self.step()
        if self.inflight > 0:
            ev = torch.cuda.Event()
            ev.record()
            self.events.append(ev)

    def reset(self) -> None:
        """After a device synchronize: every recorded event has completed."""
        self.events.clear()

    def sync(self) -> None:
        """Wait for all queued GPU work (block boundaries only)."""
        if self.cuda:
            torch.cuda.synchronize()
        self.reset()


def make_runner(step: Step, device: str, inflight: int = 2) -> StepRunner:
    """A torch step gets the in-flight bound; a step with its own ``sync`` (JAX, CuPy) runs
    plainly and synchronises itself."""
    return PlainRunner(step) if step.sync is not None else Runner(step, device, inflight)


# ---------------------------------------------------------------------------------------------
# Timing: baseline and fixed interleaved in one process


def time_interleaved(baseline: Step, fixed: Step, device: str, *, rounds: int = 10,
                     steps: int | None = None, warmup: int = 5, block_ms: float = 150.0,
                     inflight: int = 2, log: Callable[[str], None] = print) -> Timing:
    """Warm-up ``warmup`` steps each, then ``rounds`` x (M baseline, M fixed), order alternating
    (``timing.time_runners``), each torch step under the in-flight bound.

    M (``steps``) defaults to what makes a block of the slower variant last about ``block_ms``
    (3..50 steps), from a short probe after the warm-up.
    """
    return time_runners(make_runner(baseline, device, inflight),
                        make_runner(fixed, device, inflight), rounds=rounds, steps=steps,
                        warmup=warmup, block_ms=block_ms, log=log)


# ---------------------------------------------------------------------------------------------
# Tracing the baseline with torch.profiler


def trace(step: Step, path: Path, device: str, *, wait: int = 1, warmup: int = 3, active: int = 5,
          inflight: int = 2) -> dict[str, Any]:
    """Trace ``step`` with torch.profiler (CPU+CUDA, profile_memory, no shapes/stacks) into
    ``path`` (Chrome trace JSON, gzipped when the name ends with .gz).

    ``schedule(wait, warmup, active, repeat=1)``: without repeat=1 the last cycle's events are
    cleared and the export is empty (DEVICE.md).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    activities = [ProfilerActivity.CPU]
    if is_cuda(device):
        activities.append(ProfilerActivity.CUDA)
    runner = Runner(step, device, inflight)
    exported: list[float] = []

    def ready(p: Any) -> None:
        t0 = time.perf_counter()
        p.export_chrome_trace(str(path))
        exported.append(time.perf_counter() - t0)

    sync(device)
    t0 = time.perf_counter()
    with profile(activities=activities,
                 schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                 on_trace_ready=ready, record_shapes=False, with_stack=False,
                 profile_memory=True) as prof:
        for _ in range(wait + warmup + active):
            runner()
            prof.step()
    sync(device)
    wall = time.perf_counter() - t0
    if not path.exists():
        raise RuntimeError(f"profiler wrote no trace at {path}")
    return {"path": str(path), "bytes": path.stat().st_size, "wall_s": round(wall, 3),
            "export_s": round(exported[0], 3) if exported else None,
            "schedule": {"wait": wait, "warmup": warmup, "active": active, "repeat": 1}}


# ---------------------------------------------------------------------------------------------
# stepscope: import + analyze + advise, in-process


def free_memory(device: str) -> None:
    gc.collect()
    if is_cuda(device):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def cycle(make_iter: Callable[[], Iterator[Any]]) -> Generator[Any, None, None]:
    """Endless iterator: re-creates the inner iterator when it runs out."""
    while True:
        yield from make_iter()


def fmt_ms(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


# ---------------------------------------------------------------------------------------------
# A model with a host-heavy front and a GPU-heavy body (sync scenarios)


class FrontBody:
    """Per step: ``n_front`` small no-grad elementwise ops on the batch (input normalisation /
    augmentation: cheap on the GPU, ~5-10 us each to launch), then a bf16 MLP body of big GEMMs
    (GPU-heavy, few launches) with backward and fused AdamW.

    Without syncs the host launches step k+1's front while the GPU runs step k's body, so the
    front costs nothing; a sync at the end of the step exposes the whole front as GPU idle.
    """

    def __init__(self, device: str, *, n_front: int, batch: int, feat: int, width: int,
                 layers: int) -> None:
        self.device = device
        self.n_front = n_front
        self.x = randn(batch, feat, device=device, seed=3)
        self.aug_w = [1.0 + 0.001 * randn(feat, device=device, seed=100 + i)
                      for i in range(n_front)]
        self.aug_b = [0.001 * randn(feat, device=device, seed=1000 + i) for i in range(n_front)]
        self.model = mlp([feat] + [width] * layers + [feat], device)
        self.opt = adamw(self.model, device)

    def front(self) -> torch.Tensor:
        with torch.no_grad():
            x = self.x
            for w, b in zip(self.aug_w, self.aug_b):
                x = torch.addcmul(b, x, w)  # one small kernel each
            return x

    def forward(self) -> torch.Tensor:
        x = self.front()
        with autocast(self.device, torch.bfloat16):
            out = self.model(x)
        return out.float().square().mean()

    def backward_and_step(self, loss: torch.Tensor) -> None:
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def front_body(device: str) -> FrontBody:
    n_front, batch, feat, width, layers = pick(device, (400, 8192, 64, 4096, 5),
                                               (40, 64, 16, 64, 2))
    return FrontBody(device, n_front=n_front, batch=batch, feat=feat, width=width, layers=layers)


# ---------------------------------------------------------------------------------------------
# CuPy kernels on torch tensors, on torch's current stream


def cupy_or_skip() -> Any:
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or a CUDA mismatch at import
        raise SkipScenario(f"needs CuPy ({type(exc).__name__}: {exc})") from None
    return cupy


def cupy_view(t: torch.Tensor) -> Any:
    """A CuPy array over a contiguous torch CUDA tensor's memory (no copy; ``t`` owns it)."""
    import cupy as cp

    assert t.is_cuda and t.is_contiguous()
    dtype = {torch.float32: cp.float32, torch.float16: cp.float16, torch.int32: cp.int32,
             torch.int64: cp.int64}[t.dtype]
    mem = cp.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), t,
                                device_id=t.device.index or 0)
    return cp.ndarray(tuple(t.shape), dtype=dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def cupy_stream_of_torch() -> Any:
    """CuPy stream object for torch's current CUDA stream (use ``with stream:`` to launch)."""
    import cupy as cp

    ptr = torch.cuda.current_stream().cuda_stream
    return cp.cuda.ExternalStream(ptr) if ptr else cp.cuda.Stream.null
