#!/usr/bin/env python3
"""The host's own time per step of a torch scenario at full size, with the GPU held, against
what the step model estimates it to be from a torch.profiler trace and from a stepscope
recording made in the same process.

    python benchmarks/scenarios/held_host_probe.py NAME [NAME ...] --out DIR [--rounds 6]
        [--steps 3] [--device cuda]
    python benchmarks/scenarios/held_host_probe.py --compare DIR      (no GPU)

**The held host** (``held_ms``). Before each round a sleep kernel (``torch.cuda._sleep``) is
queued; the round runs one untimed step, then ``--steps`` steps back to back, each call timed.
Every kernel the steps launch waits behind the sleep, so no call waits on the GPU and no kernel
runs beside the host: a call's wall time is the host's dispatch of the step at full size
(framework ops, autograd, allocator, launches), untraced and warm (the first call after a wait
runs cold: 1-1.5 ms a step slower in the first version of this probe, on an H100 host). A round
counts only if the sleep kernel was still running when its last call returned (``held``); the
variants' rounds are interleaved. This is the quantity the step model's ``untraced`` edit
estimates from a trace (``model.stepmodel.profiler``), measured without the GPU's timing in it;
its differences between variants are the host cost of what a fix adds (autocast's casts,
cuDNN's layout transposes). The tiny-tensor step of ``host_floor_probe.py`` runs the same ops,
but not at full size.

Per scenario, in one process: every variant's ``held_ms`` and its step as the suite times it
(``step_ms``, in-flight bound 2, interleaved); then for the baseline a ``stepscope.record()``
run of 30 steps with ``stepscope record``'s defaults (``DIR/NAME.run``; first, as after
torch.profiler has run a recording in the same process loses kernels), a torch.profiler trace as
the suite takes one (``common.trace``: ``DIR/NAME.pt.trace.json.gz``), and ``held_ms`` again
(``held_after``: how far the host moved meanwhile). One JSON line per scenario in
``DIR/held.jsonl``.

``--compare DIR`` reads those lines and, for each trace and run, the step model's own estimate
of the held host: the untraced model (as the remedies start from it) replayed with every GPU op
taking no time (``host_only_ms``), next to the measured ``held_ms``. Exit 2 for a bad name, 3
when no scenario ran.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing  # after the sys.path setup
import variants

SLEEP_CYCLES_PER_MS = 2_000_000  # H100/H200 SM clocks are under 2 GHz: at least 1 ms a unit
HOLD_FACTOR = 4.0  # the sleep kernel lasts this many times the steps' expected host time
WARM = 1  # untimed calls first in each held round: the first call after a wait runs cold
# (1-1.5 ms slower a step on an H100 host, 2026-11-27: the held calls of the first version)
RECORD_STEPS = 30


def held_round(step: timing.Step, steps: int, expect_ms: float) -> tuple[list[float], bool]:
    """One round: a sleep kernel, then :data:`WARM` + ``steps`` calls, the last ``steps``
    timed; whether the GPU was still held by the sleep when the last call returned."""
    import torch

    torch.cuda.synchronize()
    hold_ms = max(50.0, HOLD_FACTOR * (WARM + steps) * expect_ms)
    torch.cuda._sleep(int(hold_ms * SLEEP_CYCLES_PER_MS))
    slept = torch.cuda.Event()
    slept.record()
    for _ in range(WARM):
        step()
    calls = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        calls.append((time.perf_counter() - t0) * 1e3)
    held = not slept.query()
    torch.cuda.synchronize()
    return calls, held


def held_ms(steps: dict[str, timing.Step], rounds: int, per_round: int,
            expect_ms: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per step of ``steps``, the median of its timed held calls; the steps interleaved round
    by round (``timing.round_order``), so that the host's drift falls on all of them."""
    calls: dict[str, list[float]] = {k: [] for k in steps}
    held = dict.fromkeys(steps, 0)
    for i in range(rounds):
        for k in timing.round_order(list(steps), i):
            got, ok = held_round(steps[k], per_round, expect_ms[k])
            if ok:
                calls[k] += got
                held[k] += 1
    return {k: {"held_ms": round(statistics.median(c), 4) if c else None,
                "held_rounds": held[k], "held_calls_ms": [round(x, 4) for x in c]}
            for k, c in calls.items()}


def record_run(step: timing.Step, runner: Any, path: Path) -> float:
    """A ``stepscope.record()`` run of the step (step boundaries after each call), with the
    CLI's defaults; the wall time of its steps (ms a step)."""
    import torch

    import stepscope

    with stepscope.record(path, steps=f"3-{RECORD_STEPS + 2}", hooks=False,
                          overwrite=True) as r:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(RECORD_STEPS + 6):
            runner()
            r.step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return wall * 1e3 / (RECORD_STEPS + 6)


def probe(name: str, out: Path, device: str, rounds: int, steps: int,
          held_only: bool = False) -> dict[str, Any]:
    import common

    mod = importlib.import_module(name)
    names = [None] + [v.name for v in variants.variants_of(mod)]
    built = {v or "baseline": timing.as_step(mod.build(variants.build_arg(mod, v), device))
             for v in names}
    runners = {k: common.make_runner(s, device) for k, s in built.items()}
    mt = timing.time_many(runners, rounds=rounds, log=lambda _m: None)
    expect = {k: mt.median(k) for k in built}
    held = held_ms(built, rounds, steps, expect)
    res: dict[str, Any] = {"scenario": name, "warm_calls": WARM, "steps_per_round": steps,
                           "variants": {k: {"step_ms": round(expect[k], 4), **held[k]}
                                        for k in built}}
    base = built["baseline"]
    if held_only:
        for s in built.values():
            s.close()
        return res
    # the recording first: after torch.profiler has run in a process, a stepscope.record() in
    # it kept under half of the kernels (H100, 2026-11-27: CUPTI's one subscription per process
    # was taken)
    run = out / f"{name}.run"
    res["record"] = {"path": run.name,
                     "wall_ms_per_step": round(record_run(base, runners["baseline"], run), 4)}
    trace = out / f"{name}.pt.trace.json.gz"
    res["trace"] = {**common.trace(base, trace, device), "path": trace.name}
    res["held_after"] = held_ms({"baseline": base}, rounds, steps, expect)["baseline"]
    for s in built.values():
        s.close()
    return res


def host_only_ms(path: Path, tmp: Path) -> dict[str, Any]:
    """The step model's estimate of the held host for a trace or a run folder: its untraced
    model replayed with every GPU op taking no time."""
    import numpy as np

    from stepscope.analysis import analyze
    from stepscope.importers import import_traces
    from stepscope.model.profiler_cost import step_costs
    from stepscope.model.stepmodel import build_step_model, replay
    from stepscope.model.stepmodel.profiler import untraced
    from stepscope.store import Run

    run = Run(path) if path.is_dir() else Run(import_traces([path], tmp / path.name))
    a = analyze(run, workers=1)
    ra = a.ranks[0]
    g = a.graph.rank(ra.rank)
    m = build_step_model(g, ra, step_costs(a.graph, g))
    if m is None:
        return {"host_only_ms": None}
    zero = np.zeros_like(m.ops.dur)
    bare = untraced(m)
    free = bare.with_ops(dur=zero, lat=zero, gap=zero)
    traced = m.with_ops(dur=zero, lat=zero, gap=zero)
    r = replay(bare)
    return {"host_only_ms": round(replay(free).step_ns / 1e6, 4),
            "traced_host_only_ms": round(replay(traced).step_ns / 1e6, 4),
            "host_busy_ms": [round(b / 1e6, 4) for b in r.host_busy_ns],
            "speed": None if m.profiler is None or m.profiler.speed is None
            else [round(float(x), 3) for x in m.profiler.speed],
            "measured_step_ms": round(m.measured_ns / 1e6, 4), "ops": int(m.ops.size)}


def compare(folder: Path) -> int:
    import tempfile

    lines = (folder / "held.jsonl").read_text().splitlines() if (
        folder / "held.jsonl").exists() else []
    if not lines:
        print(f"held_host_probe.py: {folder}/held.jsonl: no results", file=sys.stderr)
        return 2
    print("| scenario | variant | step, ms | held host, ms | held host after trace and record | "
          "trace: model's host | / held | record: model's host | / held |\n"
          "|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for line in lines:
            r = json.loads(line)
            if "trace" not in r:  # --held-only
                continue
            for k, v in r["variants"].items():
                held = v["held_ms"]
                cells = ["", "", "", "", ""]
                if k == "baseline":
                    cells = [str(r["held_after"]["held_ms"])]
                    for key in ("trace", "record"):
                        got = host_only_ms(folder / r[key]["path"], Path(tmp))
                        est = got["host_only_ms"]
                        cells += [f"{est:.3f} ({got.get('ops')} GPU ops a step)"
                                  if est is not None else "–",
                                  f"{est / held:.2f}" if est is not None and held else "–"]
                print(f"| {r['scenario']} | {k} | {v['step_ms']} | {held} | "
                      + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", type=Path, help="the folder for held.jsonl, traces and runs")
    ap.add_argument("--compare", type=Path, help="print the model's estimates against a run "
                    "of this probe (no GPU)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4, help="timed steps a held round, after one "
                    "untimed (5 steps: under 1,000 launches for these scenarios, below what "
                    "the launch queue takes before a launch blocks)")
    ap.add_argument("--held-only", action="store_true", help="the variants' held host and "
                    "steps only: no trace, no recording")
    args = ap.parse_args(argv)
    if args.compare is not None:
        return compare(args.compare)
    if not args.names or args.out is None:
        ap.error("give scenario names and --out (or --compare DIR)")
    if timing.unknown_names("held_host_probe.py", args.names):
        return 2
    if not str(args.device).startswith("cuda"):
        print("held_host_probe.py: needs a CUDA device (the GPU is held by a sleep kernel)",
              file=sys.stderr)
        return 3
    args.out.mkdir(parents=True, exist_ok=True)
    ran = 0
    for name, res in timing.each_torch(
            "held_host_probe.py", args.names,
            lambda n: probe(n, args.out, args.device, args.rounds, args.steps, args.held_only)):
        with open(args.out / "held.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        print(f"{name}: " + ", ".join(
            f"{k} held {v['held_ms']} ms ({v['held_rounds']} rounds), step {v['step_ms']} ms"
            for k, v in res["variants"].items())
            + ("" if args.held_only else
               f"; after trace and record: held {res['held_after']['held_ms']} ms"), flush=True)
        ran += 1
    return 0 if ran else 3


if __name__ == "__main__":
    raise SystemExit(main())
