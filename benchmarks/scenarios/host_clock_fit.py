#!/usr/bin/env python3
"""Fit the host clock of ``model/profiler_cost.py`` (``host_scale``: how much torch.profiler's
per-event costs are scaled by on a trace's host) to traces whose untraced step was measured
(no GPU).

    PYTHONPATH=src python3 benchmarks/scenarios/host_clock_fit.py --suite DIR1,DIR2 \\
        [--trace FILE=MS ...] [--work W]

Each DIR is what one ``record_suite`` device call returned (or a bundle tarball): every
scenario with a bundled torch.profiler trace counts, with the baseline the harness timed in
the process that made the trace (``baseline_estimates.measured_baseline``). ``--trace``
adds a trace file with its untraced step in ms (a fixture). For every trace, the step model's
untraced estimate (the remedies' ``baseline_ms``, as ``baseline_estimates.py`` computes it)
is taken at each host-speed factor of ``--grid``, giving estimate / measured as a function of
the factor. Printed:

1. per trace: the 10th percentile and the median of its CUDA launch calls (us), the factor
   the committed clock reads, estimate / measured there (computed, not interpolated), and the
   factor at which the estimate meets the measurement (``-`` where the estimate moves less
   than 5% over the grid: the host does not set that step);
2. for clocks ``(p10 - base) / span`` within the committed [MIN_SCALE, MAX_SCALE]: the counts
   within +-10 / 20 / 30% for the committed constants and for the best (base, span) of the
   search (by +-20%, then +-10%, then the summed |log ratio|);
3. leave one group out (a suite, or ``fixture``): each group's traces at the (base, span)
   fitted on the others, beside the committed clock's ratios.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent.parent / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

from baseline_estimates import (  # after the sys.path setup
    import_bundled_trace,
    measured_baseline,
    representative,
    untraced_replays,
)
from bundle import unpack

from stepscope.importers import import_traces
from stepscope.model import profiler_cost as pc
from stepscope.model.stepmodel import build_step_model
from stepscope.store.run import Run

GRID = tuple(round(0.3 + 0.1 * i, 2) for i in range(28))  # 0.3 .. 3.0
BASES = tuple(0.25 * i for i in range(21))  # us
SPANS = tuple(1.0 + 0.25 * i for i in range(21))  # us
FLAT = 0.05  # an estimate that moves less than this over the grid: host does not set the step


@dataclass(frozen=True)
class Curve:
    group: str
    name: str
    p10_us: float
    p50_us: float
    committed_scale: float
    committed_ratio: float
    grid: tuple[float, ...]
    ratios: tuple[float, ...]  # estimate / measured at each factor of ``grid``

    def at(self, scale: float) -> float:
        return float(np.interp(scale, self.grid, self.ratios))

    def needs(self) -> float | None | str:
        """The factor at which estimate = measured; None: flat; "none": not on the grid."""
        r = np.asarray(self.ratios)
        if r.max() - r.min() < FLAT:
            return None
        for i in range(r.size - 1):
            a, b = r[i], r[i + 1]
            if (a - 1.0) * (b - 1.0) <= 0 and a != b:
                return float(self.grid[i] + (1.0 - a) / (b - a) * (self.grid[i + 1] - self.grid[i]))
        return "none"


def curve(run: Run, group: str, name: str, measured_ms: float,
          grid: tuple[float, ...]) -> Curve | None:
    """The estimate / measured of ``run``'s representative step at each factor of ``grid``."""
    rep = representative(run)
    if rep is None or not pc.torch_profiler_trace(rep[0].graph):
        return None
    an, ra, g = rep
    p10, p50 = pc.launch_median_ns(g, pc.LAUNCH_QUANTILE), pc.launch_median_ns(g)
    if p10 is None or p50 is None:
        return None
    flags = pc.flags_of(an.graph)

    def ratio(k: float) -> float:
        costs = pc.torch_costs_at(k, flags["record_shapes"], flags["with_stack"],
                                  flags["profile_memory"])
        m = build_step_model(g, ra, costs)
        got = None if m is None else untraced_replays(m)
        if m is None or got is None:
            return math.nan
        r0, rb = got
        return float(m.measured_ns / 1e6 * rb.step_ns / r0.step_ns / measured_ms)

    k0 = pc.host_scale(g)
    return Curve(group, name, p10 / 1e3, p50 / 1e3, k0, ratio(k0), grid,
                 tuple(ratio(k) for k in grid))


def suite_curves(src: Path, work: Path, grid: tuple[float, ...]) -> list[Curve]:
    import json

    group = src.name.split(".")[0]
    tree = work / group
    if not unpack([src], tree):
        raise SystemExit(f"host_clock_fit.py: {src}: no bundle found")
    out = []
    for sj in sorted((tree / "scenarios").glob("*.json")):
        measured = measured_baseline(json.loads(sj.read_text()))
        run = import_bundled_trace(tree, group, sj.stem, work) if measured else None
        c = None if run is None or measured is None else curve(run, group, sj.stem, measured,
                                                                grid)
        out += [c] if c else []
    return out


def clock(c: Curve, base_us: float, span_us: float) -> float:
    return float(np.clip((c.p10_us - base_us) / span_us, pc.MIN_SCALE, pc.MAX_SCALE))


def counts(ratios: list[float]) -> tuple[int, int, int]:
    r = np.abs(np.asarray(ratios) - 1.0)
    return int(np.sum(r <= 0.1)), int(np.sum(r <= 0.2)), int(np.sum(r <= 0.3))


def fit(curves: list[Curve]) -> tuple[float, float]:
    """The (base, span) of the search with the most estimates within +-20% (then +-10%, then
    the least summed |log ratio|)."""
    best: tuple[tuple[int, int, float], float, float] | None = None
    for b in BASES:
        for s in SPANS:
            rs = [c.at(clock(c, b, s)) for c in curves]
            n10, n20, _ = counts(rs)
            key = (n20, n10, -sum(abs(math.log(max(r, 1e-6))) for r in rs))
            if best is None or key > best[0]:
                best = (key, b, s)
    assert best is not None
    return best[1], best[2]


def report(curves: list[Curve]) -> list[str]:
    lines = ["| group | trace | launch p10 us | median us | committed factor | estimate / "
             "measured | needs factor |", "|---|---|---|---|---|---|---|"]
    for c in curves:
        n = c.needs()
        need = "-" if n is None else n if isinstance(n, str) else f"{n:.2f}"
        lines.append(f"| {c.group} | {c.name} | {c.p10_us:.2f} | {c.p50_us:.2f} | "
                     f"{c.committed_scale:.2f} | {c.committed_ratio:.2f} | {need} |")
    base, span = pc.LAUNCH_BASE_NS / 1e3, pc.LAUNCH_SPAN_NS / 1e3
    fb, fs = fit(curves)
    committed = counts([c.committed_ratio for c in curves])
    fitted = counts([c.at(clock(c, fb, fs)) for c in curves])
    lines += ["", f"{len(curves)} traces; within ±10 / 20 / 30%: committed clock (base "
              f"{base:g} us, span {span:g} us) {committed[0]} / {committed[1]} / "
              f"{committed[2]}; best of the search (base {fb:g} us, span {fs:g} us) "
              f"{fitted[0]} / {fitted[1]} / {fitted[2]}", "",
              "Leave one group out: the group at the clock fitted on the others "
              "(committed clock's ratio in brackets):", ""]
    for group in dict.fromkeys(c.group for c in curves):
        rest = [c for c in curves if c.group != group]
        if not rest:
            continue
        b, s = fit(rest)
        got = ", ".join(f"{c.name} {c.at(clock(c, b, s)):.2f} ({c.committed_ratio:.2f})"
                        for c in curves if c.group == group)
        lines.append(f"- {group} (base {b:g} us, span {s:g} us): {got}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="", help="comma-separated call folders or tarballs")
    ap.add_argument("--trace", action="append", default=[],
                    help="FILE=MS: a torch.profiler trace and its untraced step (repeatable)")
    ap.add_argument("--work", type=Path, default=Path("host-clock-fit"),
                    help="where the bundles are unpacked and the traces imported")
    ap.add_argument("--grid", default=None, help="comma-separated host-speed factors")
    args = ap.parse_args(argv)
    grid = tuple(float(x) for x in args.grid.split(",")) if args.grid else GRID
    curves: list[Curve] = []
    for s in filter(None, args.suite.split(",")):
        curves += suite_curves(Path(s), args.work, grid)
    for spec in args.trace:
        path, sep, ms = spec.rpartition("=")
        try:
            step_ms = float(ms)
        except ValueError:
            step_ms = 0.0
        if not sep or not Path(path).is_file() or not step_ms > 0:
            print(f"host_clock_fit.py: --trace {spec}: expected an existing FILE=MS",
                  file=sys.stderr)
            return 2
        name = Path(path).name.split(".")[0]
        run = Run(import_traces([Path(path)], args.work / f"fixture-{name}.trace",
                                overwrite=True))
        c = curve(run, "fixture", name, step_ms, grid)
        curves += [c] if c else []
    if not curves:
        print("host_clock_fit.py: no torch.profiler trace with a measured step",
              file=sys.stderr)
        return 2
    print("\n".join(report(curves)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
