#!/usr/bin/env python3
"""A scenario as the program a user would run: its step in a plain loop, nothing else.

    python benchmarks/scenarios/program.py NAME [--fixed | --variant V] [--device cuda|cpu]
        [--seconds S | --steps N] [--inflight N]

This is what ``record_suite.py`` hands to ``stepscope record -- python program.py NAME``: no
stepscope import, no profiler, no timing harness. The step is the scenario's own (``build``),
so a torch scenario that calls a ``torch.optim`` optimizer fires record's optimizer step hook,
and a JAX, CuPy, Triton, manual-SGD or inference loop fires none. ``--fixed`` runs the default
fix variant, ``--variant V`` a named one (``variants.py``: e.g. ``fp32_no_tf32 --variant
bf16_amp``).

Length: a step-hook program runs ``PROGRAM_STEPS`` steps (default 66: record's 3 warm-up steps,
its 50-step window and ~10 steps after it); any other program runs ``PROGRAM_SECONDS`` from its
first step (default 14 s: record's time window opens 3 s after the GPU is seen in use and lasts
10 s). ``--steps`` / ``--seconds`` override.

Torch steps on CUDA keep at most ``--inflight`` steps queued on the GPU (default 2, a CUDA event
per step, as the timing harness does and as a loss read or a full launch queue does in a real
loop), so the recorded program is the one whose saving was measured; JAX and CuPy steps run
unbounded (their runtimes bound their own queues).

The closing line gives the steps, the ms/step and the process's minor page faults per step
(``getrusage``: a step that touches fresh memory every time shows thousands). With
``--warmup-steps W`` (and more than W steps run) a line before it gives the steady ms/step of
the steps after the first W (the GPU synchronised after step ``W`` and at the end): the loop's start
(worker spawn, cuDNN's choice, graph capture) left out.

Exit status 0; 3 with one line on stderr when the scenario cannot run here (no CUDA, no JAX...);
2 for a bad name.
"""

from __future__ import annotations

import argparse
import importlib
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing  # after the sys.path setup
import variants

EXIT_SKIPPED = 3


def default_device(framework: str) -> str:
    if framework != "torch":
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="scenario: " + ", ".join(timing.SCENARIOS))
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--fixed", action="store_true", help="run the default fix variant")
    which.add_argument("--variant", default=None, help="run this named fix variant")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--seconds", type=float, default=None, help="run for S seconds")
    length.add_argument("--steps", type=int, default=None, help="run N steps")
    ap.add_argument("--inflight", type=int, default=2,
                    help="torch on CUDA: max steps queued on the GPU (0: unbounded)")
    ap.add_argument("--warmup-steps", type=int, default=0,
                    help="also print the steady ms/step of the steps after this many")
    args = ap.parse_args(argv)
    if args.name not in timing.SCENARIOS:
        print(f"program.py: unknown scenario {args.name!r}", file=sys.stderr)
        return 2
    mod = importlib.import_module(args.name)
    meta = timing.ScenarioMeta.of(mod)
    names = [v.name for v in variants.variants_of(mod)]
    variant = args.variant or (names[0] if args.fixed else None)
    if variant is not None and variant not in names:
        print(f"program.py: {args.name} has no variant {variant!r}; known: {', '.join(names)}",
              file=sys.stderr)
        return 2
    device = args.device or default_device(meta.framework)
    try:
        step = timing.as_step(mod.build(variants.build_arg(mod, variant), device))
    except timing.SkipScenario as exc:
        print(f"program.py: {args.name}: cannot run here: {exc}", file=sys.stderr)
        return EXIT_SKIPPED
    if step.sync is None and meta.framework == "torch":
        import common

        runner: timing.StepRunner = common.make_runner(step, device, args.inflight)
    else:
        runner = timing.PlainRunner(step)

    steps = args.steps
    seconds = args.seconds
    if steps is None and seconds is None:
        steps, seconds = meta.program_steps, meta.program_seconds
    n = 0
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    t_steady = None
    if steps is not None:
        for n in range(1, steps + 1):
            runner()
            if n == args.warmup_steps and n < steps:
                runner.sync()
                t_steady = time.perf_counter()
    else:
        assert seconds is not None
        end = t0 + seconds
        while time.perf_counter() < end:
            runner()
            n += 1
            if n == args.warmup_steps:
                runner.sync()
                t_steady = time.perf_counter()
    runner.sync()
    t_end = time.perf_counter()
    wall = t_end - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    step.close()
    label = "baseline" if variant is None else (
        "fixed" if args.fixed or variant == variants.DEFAULT_NAME else f"variant {variant}")
    if t_steady is not None and n > args.warmup_steps:
        left = n - args.warmup_steps
        print(f"program.py: steady: {1e3 * (t_end - t_steady) / left:.3f} ms/step over the "
              f"last {left} steps", flush=True)
    print(f"program.py: {args.name} ({label}, {device}): {n} steps in {wall:.2f} s, "
          f"{1e3 * wall / max(n, 1):.3f} ms/step, {faults / max(n, 1):.0f} minor page "
          f"faults/step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
