#!/usr/bin/env python3
"""One torch scenario's baseline or fix variant traced with torch.profiler, as the suite traces
baselines (CPU+CUDA, ``common.trace``), after some untraced warm-up steps.

    python benchmarks/scenarios/trace_variant.py NAME [--variant V] --out FILE.pt.trace.json.gz
        [--warmup-steps 20] [--active 5]

The suite traces only baselines; a fixed variant's trace shows what the fix really runs (the
casts bf16 autocast adds, the layout conversions of a conv net in NCHW), to compare with what a
remedy assumed. Prints one JSON line (the trace's path, size and wall time); exit 2 for a bad
name or variant, 3 when the scenario cannot run here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing  # after the sys.path setup
import variants


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--variant", default=None, help="a fix variant (variants.py); else the baseline")
    ap.add_argument("--out", required=True, help="the trace file (.pt.trace.json.gz)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup-steps", type=int, default=20, help="untraced steps first (20)")
    ap.add_argument("--active", type=int, default=5, help="traced steps (5)")
    args = ap.parse_args(argv)
    if args.name not in timing.SCENARIOS:
        print(f"trace_variant.py: unknown scenario {args.name!r}", file=sys.stderr)
        return 2
    mod = importlib.import_module(args.name)
    if timing.ScenarioMeta.of(mod).framework != "torch":
        print(f"trace_variant.py: {args.name} is not a torch scenario", file=sys.stderr)
        return 2
    names = [v.name for v in variants.variants_of(mod)]
    if args.variant is not None and args.variant not in names:
        print(f"trace_variant.py: {args.name} has no variant {args.variant!r}; known: "
              f"{', '.join(names)}", file=sys.stderr)
        return 2
    import common

    try:
        step = timing.as_step(mod.build(variants.build_arg(mod, args.variant), args.device))
    except timing.SkipScenario as exc:
        print(f"trace_variant.py: {args.name}: cannot run here: {exc}", file=sys.stderr)
        return 3
    runner = common.make_runner(step, args.device)
    for _ in range(args.warmup_steps):
        runner()
    runner.sync()
    res = common.trace(step, Path(args.out), args.device, active=args.active)
    step.close()
    print(json.dumps({"scenario": args.name, "variant": args.variant, **res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
