"""benchmarks/scenarios/baseline_estimates.py on a bundle made here from the H100 GPT fixture:
the row it prints, the measured step it reads, and its refusals."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import baseline_estimates as be  # after the sys.path setup

from stepscope.analysis.results import analyze
from stepscope.importers import import_traces
from stepscope.model.profiler_cost import step_costs
from stepscope.model.stepmodel import build_step_model, replay
from stepscope.model.stepmodel.profiler import untraced
from stepscope.store.run import Run

TRACE = ROOT / "tests" / "data" / "gpt_bf16_adamw.pt.trace.json.gz"  # host-bound, traced


def _bundle(tmp: Path, scenario: dict[str, Any]) -> Path:
    tree = tmp / "tree"
    (tree / "scenarios").mkdir(parents=True)
    (tree / "torch" / "traces").mkdir(parents=True)
    (tree / "scenarios" / "conv.json").write_text(json.dumps(scenario))
    shutil.copy(TRACE, tree / "torch" / "traces" / "conv.pt.trace.json.gz")
    call = tmp / "call1"
    call.mkdir()
    with tarfile.open(call / "bundle.tar.gz", "w:gz") as tar:
        tar.add(tree / "scenarios", arcname="scenarios")
        tar.add(tree / "torch", arcname="torch")
    return call


def test_one_row_per_capture_with_the_remedies_baseline(tmp_path: Path, capsys: Any) -> None:
    call = _bundle(tmp_path, {"timing": {"baseline_ms": 99.0},
                              "timing_harness": {"baseline_ms": 25.0}})
    assert be.main(["--suite", str(call), "--work", str(tmp_path / "w")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == be.HEADER.splitlines() and len(out) == 3
    cells = [c.strip() for c in out[2].strip("|").split("|")]
    assert cells[:4] == ["call1", "conv", "trace", "profiler_step"]
    captured, est, meas, ratio = (float(c) for c in cells[5:9])
    assert meas == 25.0  # the harness's in-process timing, not the program's own
    assert ratio == pytest.approx(est / meas, abs=0.01)
    # the estimate is the remedies' baseline: the captured step scaled by the replay without
    # the profiler's cost, computed here the long way
    run = Run(import_traces([TRACE], tmp_path / "ref"))
    an = analyze(run, workers=1)
    ra = next(r for r in an.ranks if r.steps.steady)
    g = an.graph.rank(ra.rank)
    m = build_step_model(g, ra, step_costs(an.graph, g))
    assert m is not None
    want = m.measured_ns / 1e6 * replay(untraced(m)).step_ns / replay(m).step_ns
    assert captured == pytest.approx(m.measured_ns / 1e6, abs=0.01)
    # torch.profiler cost taken out of a host-bound step: 39.3 ms traced, 23.8 estimated
    assert est == pytest.approx(want, abs=0.01) and est < 0.7 * captured


def test_no_ratio_for_steps_from_periodicity_nor_without_a_measurement() -> None:
    e = be.Estimate("s", "x", "record", 6.5, 2.0, 1.7, 17.4, 1.7, 0.2, "periodicity")
    assert e.ratio is None and "| - |" in e.line()
    assert be.Estimate("s", "x", "trace", None, 2.0, 1.7, None, 1.7, 0.2, "hook").ratio is None
    assert be.Estimate("s", "x", "trace", None, 2.0, 1.7, 1.7, 1.7, 0.2, "hook").ratio == 1.0
    assert be.measured_baseline({"timing": {"baseline_ms": 5}}) == 5.0
    assert be.measured_baseline({"timing": "n/a"}) is None


def test_a_folder_without_a_bundle_is_refused(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "empty").mkdir()
    assert be.main(["--suite", str(tmp_path / "empty"), "--work", str(tmp_path / "w")]) == 2
    assert "no bundle found" in capsys.readouterr().err
