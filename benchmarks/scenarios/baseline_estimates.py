#!/usr/bin/env python3
"""How far a capture's estimate of the untraced step is from the step measured untraced, per
scenario of finished ``record_suite`` calls (no GPU).

    PYTHONPATH=src python3 benchmarks/scenarios/baseline_estimates.py --suite DIR1,DIR2 [--work W]

Each DIR is what one device call returned (results and bundle parts) or a bundle tarball; the
bundles are unpacked into ``W/DIRNAME/``. For every scenario with a bundled torch.profiler trace
or recorded run, the step model of the capture is built, the capture's host cost taken out
(``stepmodel.profiler.untraced``) and replayed: the estimate is the captured step times
``replay(untraced) / replay(model)``, as the remedies' ``baseline_ms``. Printed beside it: the
step measured untraced (the harness's in-process timing, ``timing_harness`` where the
scenario's program timed itself), the ratio, the replayed host and GPU busy time of the
untraced model (which of the two sets the step) and the median duration of the capture's CUDA
launch calls (the host clock of ``model.profiler_cost``). A recorded run is read before
``record``'s own after-window calibration, which this leaves out; where its steps were recovered
from the kernel stream's periodicity they may be a part of the program's step, and no ratio is
given.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent.parent / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

from bundle import unpack  # after the sys.path setup

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.results import analyze
from stepscope.importers import import_traces
from stepscope.model.profiler_cost import launch_median_ns, step_costs
from stepscope.model.stepmodel import build_step_model
from stepscope.model.stepmodel.profiler import untraced
from stepscope.model.stepmodel.replay import Replay, replay
from stepscope.model.stepmodel.steps import StepModel
from stepscope.store.run import Run


@dataclass(frozen=True)
class Estimate:
    suite: str
    scenario: str
    path: str  # "trace" or "record"
    launch_us: float | None
    captured_ms: float
    estimate_ms: float
    measured_ms: float | None
    host_ms: float
    gpu_ms: float
    steps: str  # where the capture's steps came from (``StepInfo.source``)

    @property
    def ratio(self) -> float | None:
        """Estimate over measured; None where the capture's steps are not the program's (a
        recorded run's steps recovered from the kernel stream's periodicity may be a part of
        it: the launch loop's 2,000 identical launches read as periods of 144)."""
        if not self.measured_ms or self.steps == "periodicity":
            return None
        return self.estimate_ms / self.measured_ms

    def line(self) -> str:
        launch = "-" if self.launch_us is None else f"{self.launch_us:.2f}"
        meas = "-" if self.measured_ms is None else f"{self.measured_ms:.2f}"
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}"
        return (f"| {self.suite} | {self.scenario} | {self.path} | {self.steps} | {launch} | "
                f"{self.captured_ms:.2f} | {self.estimate_ms:.2f} | {meas} | {ratio} | "
                f"{self.host_ms:.2f} | {self.gpu_ms:.2f} |")


HEADER = ("| suite | scenario | capture | steps | launch median us | captured ms | estimate ms | "
          "measured ms | estimate / measured | host busy ms | GPU busy ms |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def measured_baseline(scenario: dict[str, Any]) -> float | None:
    """The untraced baseline the harness timed in the process that made the trace."""
    t = scenario.get("timing_harness") or scenario.get("timing") or {}
    v = t.get("baseline_ms") if isinstance(t, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def representative(run: Run) -> tuple[Analysis, RankAnalysis, StepGraph] | None:
    """``run``'s analysis, the rank with the most steady steps and that rank's graph (None
    without a steady step)."""
    an = analyze(run, workers=1)
    ranks = [r for r in an.ranks if r.steps.steady]
    if not ranks:
        return None
    ra = max(ranks, key=lambda r: len(r.steps.steady))
    return an, ra, an.graph.rank(ra.rank)


def untraced_replays(m: StepModel) -> tuple[Replay, Replay] | None:
    """The replay of step model ``m`` and of ``m`` without the capture's host cost; the
    untraced estimate is ``m.measured_ns`` x the second's step over the first's (None where
    the first replays to nothing)."""
    r0, rb = replay(m), replay(untraced(m))
    return None if r0.step_ns <= 0 else (r0, rb)


def estimate(run: Run, suite: str, scenario: str, path: str,
             measured: float | None) -> Estimate | None:
    """The untraced estimate of ``run``'s representative step (None without a step model)."""
    rep = representative(run)
    if rep is None:
        return None
    an, ra, g = rep
    m = build_step_model(g, ra, step_costs(an.graph, g))
    got = None if m is None else untraced_replays(m)
    if m is None or got is None:
        return None
    r0, rb = got
    med = launch_median_ns(g)
    return Estimate(suite, scenario, path, None if med is None else med / 1e3,
                    m.measured_ns / 1e6, m.measured_ns / 1e6 * rb.step_ns / r0.step_ns,
                    measured, max(rb.host_busy_ns, default=0) / 1e6, rb.gpu_busy_ns / 1e6,
                    str(ra.steps.source))


def import_bundled_trace(tree: Path, suite: str, name: str, work: Path) -> Run | None:
    """Scenario ``name``'s torch.profiler trace in the unpacked bundle ``tree``, imported into
    ``work`` as ``SUITE-NAME.trace`` (None: the bundle has none)."""
    trace = tree / "torch" / "traces" / f"{name}.pt.trace.json.gz"
    if not trace.is_file():
        return None
    return Run(import_traces([trace], work / f"{suite}-{name}.trace", overwrite=True))


def suite_estimates(tree: Path, suite: str, work: Path) -> list[Estimate]:
    """Every scenario of an unpacked bundle ``tree``: its trace's and its recorded run's."""
    out: list[Estimate] = []
    for sj in sorted((tree / "scenarios").glob("*.json")):
        name = sj.stem
        measured = measured_baseline(json.loads(sj.read_text()))
        run = import_bundled_trace(tree, suite, name, work)
        if run is not None:
            e = estimate(run, suite, name, "trace", measured)
            out += [e] if e else []
        rec = tree / "rec" / name
        if (rec / "manifest.json").is_file():
            e = estimate(Run(rec), suite, name, "record", measured)
            out += [e] if e else []
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", required=True, help="comma-separated call folders or tarballs")
    ap.add_argument("--work", type=Path, default=Path("baseline-estimates"),
                    help="where the bundles are unpacked and the traces imported")
    args = ap.parse_args(argv)
    print(HEADER)
    for s in args.suite.split(","):
        src = Path(s)
        name = src.name.split(".")[0]
        tree = args.work / name
        if not unpack([src], tree):
            print(f"{src}: no bundle found", file=sys.stderr)
            return 2
        for e in suite_estimates(tree, name, args.work):
            print(e.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
