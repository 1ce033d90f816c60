#!/usr/bin/env python3
"""The host's share of a torch scenario's step, for each of its variants: the step at full
size and the same step on tiny tensors (the sizes of the CPU smoke path, on the GPU), timed
interleaved in one process, and the tiny step's CPU ops counted by torch.profiler.

    python benchmarks/scenarios/host_floor_probe.py NAME [NAME ...] --out FILE.jsonl
        [--rounds 8] [--device cuda]

On tiny tensors every kernel is a few microseconds, so the tiny step is the host's dispatch of
the same ops (the same layers, casts, optimizer, allocator calls): the floor the host puts
under the full-size step. A fix that moves the GPU below that floor leaves the step there;
bf16 autocast raises the floor by its casts (issue 22: conv_fp32's bf16 step measured slower
than its TF32 step). One JSON line per scenario and variant: ``full_ms`` and ``tiny_ms`` (the
median block), the blocks, ``full_call_ms`` (the median wall time of the full-size step's own
call: its host work, the in-flight bound's waits left out), and per tiny step the CPU ops, the ``aten::_to_copy`` casts and the
``ToCopyBackward0`` nodes. Exit 2 for a bad name, 3 when no scenario could run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing  # after the sys.path setup
import variants


def _tiny(mod: Any) -> None:
    """The module's sizes as on the CPU smoke path (``common.pick``'s ``cpu`` argument)."""
    mod.pick = lambda _device, _cuda, cpu: cpu


def _count_ops(step: timing.Step, runner: Any, steps: int = 3) -> dict[str, float]:
    """CPU ops per step (torch.profiler, CPU activity only) of ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    runner.sync()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            runner()
        runner.sync()
    names = [e.name for e in prof.events()]
    return {"cpu_ops": len(names) / steps,
            "to_copy": sum(n == "aten::_to_copy" for n in names) / steps,
            "to_copy_backward": sum(n == "ToCopyBackward0" for n in names) / steps}


def _call_ms(step: timing.Step, runner: Any, steps: int = 60) -> float:
    """Median wall time of the step's own call (its host dispatch, and anything that blocks
    inside it), the in-flight bound's waits left out."""
    import time

    runner.sync()
    calls = []
    inner = step.fn

    def timed() -> None:
        t0 = time.perf_counter()
        inner()
        calls.append(time.perf_counter() - t0)

    step.fn = timed
    for _ in range(steps):
        runner()
    step.fn = inner
    runner.sync()
    return statistics.median(calls) * 1e3


def probe(name: str, device: str, rounds: int) -> list[dict[str, Any]]:
    import common

    full_mod = importlib.import_module(name)
    runners: dict[str, Any] = {}
    steps: dict[str, timing.Step] = {}
    names = [None] + [v.name for v in variants.variants_of(full_mod)]
    for size in ("full", "tiny"):
        mod = full_mod
        if size == "tiny":
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _tiny(mod)
        for v in names:
            key = f"{size}:{v or 'baseline'}"
            steps[key] = timing.as_step(mod.build(variants.build_arg(mod, v), device))
            runners[key] = common.make_runner(steps[key], device)
    keys = list(runners)
    # time_many wants the baseline first and named "baseline"
    order = {"baseline": runners[keys[0]], **{k: runners[k] for k in keys[1:]}}
    mt = timing.time_many(order, rounds=rounds, log=lambda _m: None)
    # every call timed before torch.profiler first runs in the process: timed after it
    # (2026-11-27, second call), conv_fp32's TF32 call took 3.85 ms where its interleaved step
    # had run at 3.15 ms (whether the profiler slowed the host was not measured)
    full_keys = {v: f"full:{v}" if v else keys[0] for v in names}
    calls = {v: _call_ms(steps[k], runners[k]) for v, k in full_keys.items()}
    out = []
    for v in names:
        vn = v or "baseline"
        full = mt.blocks_ms["baseline" if vn == "baseline" else f"full:{vn}"]
        tiny = mt.blocks_ms[f"tiny:{vn}"]
        ops = _count_ops(steps[f"tiny:{vn}"], runners[f"tiny:{vn}"])
        call = calls[v]
        out.append({"scenario": name, "variant": vn, "full_ms": round(statistics.median(full), 4),
                    "tiny_ms": round(statistics.median(tiny), 4),
                    "full_call_ms": round(call, 4),
                    "full_blocks_ms": [round(x, 4) for x in full],
                    "tiny_blocks_ms": [round(x, 4) for x in tiny],
                    "steps_per_block": mt.steps_per_block, **ops})
    for s in steps.values():
        s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--out", required=True, help="JSON lines, appended")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    if timing.unknown_names("host_floor_probe.py", args.names):
        return 2
    ran = 0
    for _name, rows in timing.each_torch("host_floor_probe.py", args.names,
                                         lambda n: probe(n, args.device, args.rounds)):
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
                print(f"{r['scenario']} {r['variant']}: full {r['full_ms']:.3f} ms, tiny "
                      f"{r['tiny_ms']:.3f} ms, full call {r['full_call_ms']:.3f} ms, {r['cpu_ops']:.0f} CPU ops, "
                      f"{r['to_copy']:.0f} casts, {r['to_copy_backward']:.0f} cast backwards")
        ran += 1
    return 0 if ran else 3


if __name__ == "__main__":
    raise SystemExit(main())
