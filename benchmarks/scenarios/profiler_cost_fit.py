#!/usr/bin/env python3
"""Check the torch.profiler cost model (``profiler_cost``) against GPU suites already run.

Each suite folder (or ``.tar.gz`` of one) holds what ``record_suite.py`` wrote: one
``scenarios/NAME.json`` per scenario (untraced baseline and fixed step times, measured on the GPU)
and ``torch/traces/NAME.pt.trace.json.gz`` (the baseline traced with torch.profiler). Without a
GPU this script

1. prints, per trace, the host events per step inside the profiler steps, the measured profiler
   cost (traced median step minus untraced baseline) and what the per-event constants give;
2. re-scores every trace with the advisor, once per constant set given with ``--costs``: is the
   planted rule ranked first, is its estimate within +-30% of the measured saving.

    PYTHONPATH=src python3 benchmarks/scenarios/profiler_cost_fit.py \
        docs/data/accuracy-2026-11-26/profiler-traces/*.tar.gz \
        --costs 2000,8000,400,1000 --costs 2000,3500,300,1000

``--costs`` is OP_NS,API_NS,MEMORY_NS,PYTHON_NS (ns per event). The constants are swapped in the
module for the scoring only; the committed values are the first set printed when none is given.

The host-speed clock that scales these constants per trace (``profiler_cost.host_scale``) is
fitted by ``host_clock_fit.py`` (this script's ``--speed``, which fitted the median clock it
replaced, is gone with it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    expected: str
    measured_pct: float
    baseline_ms: float
    traced_ms: float
    run: Path


def _suite_dirs(paths: list[str], tmp: Path) -> Iterator[tuple[str, Path]]:
    for p in map(Path, paths):
        if p.is_dir():
            yield p.name, p
            continue
        out = tmp / p.name.removesuffix(".tar.gz")
        with tarfile.open(p) as tar:
            tar.extractall(out, filter="data")
        yield out.name, out


def load_cases(paths: list[str], tmp: Path) -> list[Case]:
    from stepscope.importers import import_traces

    cases = []
    for suite, root in _suite_dirs(paths, tmp):
        for sj in sorted((root / "scenarios").glob("*.json")):
            d = json.loads(sj.read_text())
            trace = root / "torch" / "traces" / f"{sj.stem}.pt.trace.json.gz"
            timing, traced = d.get("timing") or {}, (d.get("profiler") or {}).get("traced") or {}
            if not (trace.exists() and d.get("expected") and timing and traced):
                continue
            run = tmp / "runs" / suite / sj.stem
            import_traces([trace], run, overwrite=True)
            cases.append(Case(suite, sj.stem, d["expected"], float(timing["saving_pct"]),
                              float(timing["baseline_ms"]), float(traced["step_median_ms"]), run))
    return cases


def _window(r: Any) -> tuple[int, int, int, int]:
    """First start, last end, count and summed length of the run's steps."""
    lo, hi, n, total = r.query("select min(ts_ns), max(ts_ns + dur_ns), count(*), sum(dur_ns) "
                               "from steps").to_pylist()[0].values()
    return int(lo), int(hi), int(n), int(total)


def event_counts(run: Path) -> tuple[float, float, float, float]:
    """Per-step ops (not Python), Python events, API calls, memory events inside the steps."""
    from stepscope.store.run import Run

    r = Run(run)
    lo, hi, n, _ = _window(r)
    w = f"ts_ns >= {lo} and ts_ns < {hi}"

    def count(sql: str) -> float:
        return float(r.query(sql).column(0)[0].as_py()) / max(n, 1)

    return (count(f"select count(*) from cpu_ops where {w} and kind <> 'python'"),
            count(f"select count(*) from cpu_ops where {w} and kind = 'python'"),
            count(f"select count(*) from api_calls where {w}"),
            count(f"select count(*) from memory_events where {w}"))


def score(cases: list[Case], costs: tuple[int, int, int, int]) -> list[tuple[Case, float | None, str]]:
    from stepscope.model import profiler_cost
    from stepscope.reporters.report import build_report
    from stepscope.store.run import Run

    # swapped for this scoring only (module constants read at call time by costs_for)
    profiler_cost.OP_NS, profiler_cost.API_NS, profiler_cost.MEMORY_NS, profiler_cost.PYTHON_NS = costs
    out = []
    for c in cases:
        findings = build_report(Run(c.run)).advice.findings
        est = next((f.est_saving_pct for f in findings if f.id == c.expected), None)
        out.append((c, est, findings[0].id if findings else "none"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="+", help="suite folders or .tar.gz of them")
    ap.add_argument("--all", action="store_true", help="list every scored trace, not only misses")
    ap.add_argument("--only", default="", help="comma-separated scenario names to use")
    ap.add_argument("--costs", action="append", default=[],
                    help="OP_NS,API_NS,MEMORY_NS,PYTHON_NS to score with (repeatable)")
    args = ap.parse_args()
    from stepscope.model import profiler_cost as pc

    committed = (pc.OP_NS, pc.API_NS, pc.MEMORY_NS, pc.PYTHON_NS)
    sets = [tuple(int(x) for x in s.split(",")) for s in args.costs] or [committed]
    with tempfile.TemporaryDirectory() as tmp:
        cases = load_cases(args.suites, Path(tmp))
        if args.only:
            cases = [c for c in cases if c.name in args.only.split(",")]
        print("suite  scenario            ops/step  api  memory  measured cost ms  model ms "
              + " ".join(f"[{','.join(map(str, s))}]" for s in sets))
        for c in cases:
            ops, py, api, mem = event_counts(c.run)
            models = [(ops * s[0] + py * s[3] + api * s[1] + mem * s[2]) / 1e6 for s in sets]
            print(f"{c.suite:6} {c.name:18} {ops:8.0f} {api:5.0f} {mem:6.0f} "
                  f"{c.traced_ms - c.baseline_ms:17.2f}  " + " ".join(f"{m:9.2f}" for m in models))
        for s in sets:
            res = score(cases, s)  # type: ignore[arg-type]
            within = [r for r in res if r[1] is not None and 0.7 <= r[1] / r[0].measured_pct <= 1.3]
            first = [r for r in res if r[2] == r[0].expected]
            print(f"\ncosts {s}: planted rule first {len(first)}/{len(res)}, "
                  f"estimate within +-30% {len(within)}/{len(res)}")
            for c, est, top in res:
                if args.all or (c, est, top) not in within or top != c.expected:
                    shown = "none" if est is None else f"{est:.1f}%"
                    print(f"  {c.suite} {c.name}: {c.expected} est {shown} vs measured "
                          f"{c.measured_pct:.1f}%, top {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
