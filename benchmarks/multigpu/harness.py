"""Harness of the multi-GPU PyTorch programs: process group, arguments, untraced timing, one
torch.profiler trace per rank, the JSON line.

A program sets the NCCL environment (multicast off) before it imports torch, then defines::

    NAME = "ddp_straggler"
    def build(fixed: bool, ctx: Ctx, args) -> timing.Step   # ONE training step per call
    if __name__ == "__main__": sys.exit(harness.main(NAME, build, add_args))

and is launched with ``torchrun --standalone --nproc-per-node=N program.py [options]``
(``--backend gloo``, or automatically when CUDA is missing: the same program on the CPU).

It reuses the planted-bottleneck suite's conventions (``../scenarios``): ``common.Runner`` (at
most ``--inflight`` steps queued on the GPU), ``timing.time_runners`` (baseline and fixed
interleaved in one process, ``--compare``), ``common.trace`` (torch.profiler CPU+CUDA,
``schedule(wait, warmup, active, repeat=1)``, gzipped Chrome trace), here one file per rank:
``DIR/NAME.rankR.pt.trace.json.gz``.

Modes (rank 0 prints ONE JSON line, ``{"mgpu": 1, ...}``, the last line of its output):

- default: ``--warmup`` steps, then ``--steps`` steps (or ``--seconds``) of the variant
  (``--fix``), each timed on the host under the in-flight bound: ``median_step_ms`` is the
  median over steps on rank 0, ``per_rank_median_ms`` every rank's.
- ``--compare``: both variants built, timed interleaved (``--rounds`` x (``--steps`` baseline,
  ``--steps`` fixed), order alternating), ``base_ms``/``fix_ms`` = medians of the per-block
  mean step time on rank 0, ``saving_ms``/``saving_pct``.
- ``--profile DIR`` (with either): afterwards the variant (``--fix`` or not) traced with
  torch.profiler on every rank.

Every rank runs the same sequence of steps (block sizes are never auto-probed per rank: ranks
must issue the same collectives).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCEN = HERE.parent / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import common  # the suite's Runner, trace, mlp, adamw, train_step (after the sys.path setup)
import timing
import torch
import torch.distributed as dist
from registry import EXIT_SKIPPED, HOOK_STEPS, JSON_KEY


@dataclass(frozen=True)
class Ctx:
    """Where this rank runs."""

    rank: int
    world: int
    local_rank: int
    device: str  # "cuda:I" or "cpu"
    backend: str  # "nccl" or "gloo"

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def pick(self, cuda: Any, cpu: Any) -> Any:
        return cuda if self.cuda else cpu


Build = Callable[[bool, Ctx, argparse.Namespace], timing.Step]


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=name, description=(doc or "").split("\n\n")[0])
    ap.add_argument("--fix", action="store_true", help="run the fixed variant")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps to time (default 66: stepscope record's default window); "
                         "with --compare: steps per block (default 10)")
    ap.add_argument("--seconds", type=float, default=None, help="run for S seconds instead")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (5)")
    ap.add_argument("--compare", action="store_true",
                    help="time baseline and fixed interleaved in this process")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--compare: rounds of (baseline block, fixed block) (3)")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="then trace the variant with torch.profiler, one file per rank")
    ap.add_argument("--profile-schedule", default="1,3,5", metavar="W,U,A",
                    help="torch.profiler schedule wait,warmup,active (1,3,5)")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                    help="default: nccl when CUDA is there, else gloo (CPU)")
    ap.add_argument("--inflight", type=int, default=2,
                    help="CUDA: at most N steps queued on the GPU (0: unbounded)")
    return ap


def init(args: argparse.Namespace) -> Ctx:
    """The process group from torchrun's environment (a single process without it)."""
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        raise SystemExit("--backend nccl needs CUDA; use --backend gloo on the CPU")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    else:
        device = "cpu"
    kw: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=300)}
    if backend == "nccl":
        kw["device_id"] = torch.device(device)
    dist.init_process_group(**kw)
    return Ctx(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local,
               device=device, backend=backend)


def busy_wait(seconds: float) -> None:
    """Pure-Python busy loop (host work that holds the GIL), not a sleep."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1


def ddp(model: torch.nn.Module, ctx: Ctx, **kw: Any) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    if ctx.cuda:
        return DistributedDataParallel(model, device_ids=[ctx.local_rank], **kw)
    return DistributedDataParallel(model, **kw)


def _times(runner: timing.StepRunner, n: int | None, seconds: float | None) -> list[float]:
    """Per-step host wall times (ms) of ``n`` steps (or ``seconds``)."""
    out: list[float] = []
    end = time.perf_counter() + seconds if seconds is not None else None
    while (n is not None and len(out) < n) or (end is not None and time.perf_counter() < end):
        t0 = time.perf_counter()
        runner()
        out.append((time.perf_counter() - t0) * 1e3)
    runner.sync()
    return out


def _step_count(runner: timing.StepRunner, args: argparse.Namespace, ctx: Ctx) -> int:
    """How many steps every rank runs: ``--steps``, or ``--seconds`` over rank 0's step time
    (a few probe steps), the same on every rank (ranks must issue the same collectives)."""
    if args.seconds is None:
        return args.steps if args.steps is not None else HOOK_STEPS
    probe = _times(runner, 3, None)
    n = max(1, round(args.seconds * 1e3 / max(statistics.median(probe), 1e-3)))
    return int(_gather(n, ctx)[0])


def _gather(x: Any, ctx: Ctx) -> list[Any]:
    got: list[Any] = [None] * ctx.world
    dist.all_gather_object(got, x)
    return got


def _schedule(text: str) -> tuple[int, int, int]:
    w, u, a = (int(v) for v in text.split(","))
    return w, u, a


def trace_rank(step: timing.Step, ctx: Ctx, name: str, out_dir: Path,
               sched: tuple[int, int, int], inflight: int) -> dict[str, Any]:
    """This rank's torch.profiler trace, ``out_dir/NAME.rankR.pt.trace.json.gz``."""
    path = out_dir / f"{name}.rank{ctx.rank}.pt.trace.json.gz"
    wait, warmup, active = sched
    dist.barrier()
    res: dict[str, Any] = common.trace(step, path, ctx.device, wait=wait, warmup=warmup,
                                       active=active, inflight=inflight)
    return res


def main(name: str, build: Build, add_args: Callable[[argparse.ArgumentParser], None] | None
         = None, doc: str | None = None, argv: list[str] | None = None) -> int:
    ap = parser(name, doc)
    if add_args:
        add_args(ap)
    args = ap.parse_args(argv)
    ctx = init(args)
    say = print if ctx.rank == 0 else (lambda *a, **k: None)
    line: dict[str, Any] = {JSON_KEY: 1, "program": name, "world_size": ctx.world,
                            "backend": ctx.backend, "device": ctx.device.split(":")[0],
                            "torch": torch.__version__}
    if ctx.cuda:
        line["gpu"] = torch.cuda.get_device_name(ctx.local_rank)
    t_start = time.perf_counter()
    try:
        return _run(name, build, args, ctx, line, say, t_start)
    except timing.SkipScenario as exc:
        print(f"{name}: cannot run here: {exc}", file=sys.stderr, flush=True)
        return EXIT_SKIPPED
    finally:
        if dist.is_initialized():
            # the built steps' DDP models sit in reference cycles: freed by the collector at
            # interpreter exit, after the group is gone, they aborted gloo ranks ("terminate
            # called without an active exception", 17 runs of ddp_extra_allreduce in 38 on a
            # loaded 2-core box); collected here, while the group lives, none in 50
            gc.collect()
            dist.destroy_process_group()


def _run(name: str, build: Build, args: argparse.Namespace, ctx: Ctx, line: dict[str, Any],
         say: Callable[..., None], t_start: float) -> int:
    if args.compare:
        base = build(False, ctx, args)
        fix = build(True, ctx, args)
        m = args.steps or 10
        rb = common.make_runner(base, ctx.device, args.inflight)
        rf = common.make_runner(fix, ctx.device, args.inflight)
        dist.barrier()
        t = timing.time_runners(rb, rf, rounds=args.rounds, steps=m, warmup=args.warmup,
                                log=lambda s: say(f"{name}: {s.strip()}", flush=True))
        per_rank = _gather([t.baseline_ms, t.fixed_ms], ctx)
        line.update(variant="compare", base_ms=round(t.baseline_ms, 4),
                    fix_ms=round(t.fixed_ms, 4), saving_ms=round(t.saving_ms, 4),
                    saving_pct=round(t.saving_pct, 2), median_step_ms=round(t.baseline_ms, 4),
                    timing=t.to_dict(),
                    per_rank_ms=[[round(b, 4), round(f, 4)] for b, f in per_rank])
        info = {"baseline": base.info, "fixed": fix.info}
        traced = fix if args.fix else base
        (base if args.fix else fix).close()
    else:
        traced = build(args.fix, ctx, args)
        info = traced.info
        runner = common.make_runner(traced, ctx.device, args.inflight)
        _times(runner, args.warmup, None)
        n = _step_count(runner, args, ctx)
        dist.barrier()
        ts = _times(runner, n, None)
        meds = _gather(statistics.median(ts) if ts else None, ctx)
        line.update(variant="fix" if args.fix else "base", steps=len(ts),
                    median_step_ms=round(statistics.median(ts), 4) if ts else None,
                    mean_step_ms=round(statistics.fmean(ts), 4) if ts else None,
                    per_rank_median_ms=[None if v is None else round(v, 4) for v in meds])
    line["info"] = info
    if args.profile:
        tr = trace_rank(traced, ctx, name, Path(args.profile), _schedule(args.profile_schedule),
                        args.inflight)
        paths = _gather(tr["path"], ctx)
        line["profile"] = {"traces": paths, "schedule": tr["schedule"],
                           "traced_variant": "fix" if args.fix else "base"}
    traced.close()
    dist.barrier()
    line["wall_s"] = round(time.perf_counter() - t_start, 2)
    say(json.dumps(line, default=str), flush=True)
    return 0

