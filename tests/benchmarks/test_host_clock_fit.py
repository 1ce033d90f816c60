"""benchmarks/scenarios/host_clock_fit.py on the H100 GPT fixture (untraced step measured at
25 ms): its row, the fit's arithmetic on hand-made curves, and its refusals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import host_clock_fit as hcf  # after the sys.path setup

from stepscope.analysis.results import analyze
from stepscope.importers import import_traces
from stepscope.model import profiler_cost as pc
from stepscope.model.stepmodel import build_step_model, replay
from stepscope.model.stepmodel.profiler import untraced
from stepscope.store.run import Run

TRACE = ROOT / "tests" / "data" / "gpt_bf16_adamw.pt.trace.json.gz"


def test_the_fixture_row_and_the_estimate_at_each_factor(tmp_path: Path, capsys: Any) -> None:
    rc = hcf.main(["--trace", f"{TRACE}=25", "--grid", "0.5,1,1.5", "--work",
                   str(tmp_path / "w")])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| group | trace | launch p10 us |")
    cells = [c.strip() for c in out[2].strip("|").split("|")]
    assert cells[:2] == ["fixture", "gpt_bf16_adamw"]
    p10, p50, k0, ratio = (float(c) for c in cells[2:6])
    # the committed clock: (p10 - base) / span
    assert k0 == pytest.approx((p10 * 1e3 - pc.LAUNCH_BASE_NS) / pc.LAUNCH_SPAN_NS, abs=0.01)
    assert p10 < p50
    # the ratio at the committed factor, the long way: the captured step scaled by the replay
    # without the profiler's cost, over the 25 ms measured
    run = Run(import_traces([TRACE], tmp_path / "ref"))
    an = analyze(run, workers=1)
    ra = an.ranks[0]
    g = an.graph.rank(ra.rank)
    m = build_step_model(g, ra, pc.costs_for(an.graph, g))
    assert m is not None
    est = m.measured_ns / 1e6 * replay(untraced(m)).step_ns / replay(m).step_ns
    assert ratio == pytest.approx(est / 25.0, abs=0.01)
    # a host-bound step: a larger factor takes more out; it meets 25 ms between 0.5 and 1.5
    needs = float(cells[6])
    assert 0.5 < needs < 1.5
    assert any(line.startswith("1 traces; within ±10 / 20 / 30%") for line in out)


def _curve(group: str, p10: float, needs: float) -> hcf.Curve:
    """A trace whose estimate / measured falls linearly with the factor, 1 at ``needs``."""
    grid = (0.5, 1.0, 1.5, 2.0)
    return hcf.Curve(group, f"t{p10}", p10, p10 + 1.0, 1.0, 1.0, grid,
                     tuple(1.0 - 0.5 * (k - needs) for k in grid))


def test_the_fit_finds_the_clock_that_the_curves_need() -> None:
    # every trace needs (p10 - 2) / 2.5: the search finds base 2 us, span 2.5 us
    curves = [_curve(g, p10, (p10 - 2.0) / 2.5) for g, p10 in
              (("a", 4.0), ("a", 5.0), ("b", 6.0), ("b", 6.5), ("c", 3.5))]
    assert hcf.fit(curves) == (2.0, 2.5)
    assert hcf.counts([c.at(hcf.clock(c, 2.0, 2.5)) for c in curves]) == (5, 5, 5)
    flat = hcf.Curve("a", "gpu", 5.0, 6.0, 1.0, 1.0, (0.5, 1.0), (1.0, 1.01))
    assert flat.needs() is None  # the host does not set this step
    off = hcf.Curve("a", "off", 5.0, 6.0, 1.0, 1.0, (0.5, 1.0), (0.8, 0.7))
    assert off.needs() == "none"  # under at every factor of the grid
    lines = hcf.report(curves)
    assert "- a (base " in "\n".join(lines)  # leave-one-group-out rows


def test_refusals(tmp_path: Path, capsys: Any) -> None:
    assert hcf.main(["--work", str(tmp_path)]) == 2
    assert "no torch.profiler trace" in capsys.readouterr().err
    assert hcf.main(["--trace", f"{TRACE}=fast", "--work", str(tmp_path)]) == 2
    assert "expected an existing FILE=MS" in capsys.readouterr().err
    assert hcf.main(["--trace", f"{tmp_path / 'missing.json'}=3", "--work",
                     str(tmp_path)]) == 2
