"""The package face: load, analyze, report, the error tree, the version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import stepscope
from stepscope._version import __version__
from stepscope.errors import RunError, StepscopeError, TraceFormatError
from stepscope.reporters.json_report import to_json
from stepscope.reporters.report import Report, build_report
from stepscope.reporters.terminal import render_text
from stepscope.store.run import Run

DATA = Path(__file__).parent / "data"


def test_load_opens_a_run_or_imports_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "cnn.pt.trace.json.gz"
    shutil.copy(DATA / "cnn_fp32_sync.pt.trace.json.gz", trace)
    run = stepscope.load(trace)  # a Profile (tests/nbapi): the run is its .run
    assert run.path == tmp_path / "cnn.stepscope" and run.run.table("kernels").num_rows > 0
    again = stepscope.load(run.path)  # a run folder opens as it is
    assert again.path == run.path and again.ranks == run.ranks
    other = stepscope.load(trace, out=tmp_path / "x")
    assert other.path == tmp_path / "x"
    assert stepscope.load(trace, out=tmp_path / "x").opened.how == "reused"  # the same import
    with pytest.raises(StepscopeError):
        stepscope.load(DATA / "gpt_bf16_adamw.pt.trace.json.gz", out=tmp_path / "x")  # not it
    assert stepscope.load(trace).opened.how == "reused"
    assert stepscope.load(trace, overwrite=True).path == run.path
    with pytest.raises(StepscopeError):
        stepscope.load(tmp_path / "missing.json")


def test_analyze_and_report_match_the_reporters(tmp_path: Path) -> None:
    run = stepscope.load(DATA / "cnn_fp32_sync.pt.trace.json.gz", out=tmp_path / "r")
    rep = stepscope.analyze(run)
    assert isinstance(rep, Report) and rep.page is None and rep.run_path == run.path
    assert stepscope.report(rep) == render_text(build_report(Run(run.path)))
    assert stepscope.report(str(run.path), "json") == to_json(rep)
    html = stepscope.report(rep, "html")  # a report without its page is analysed again
    assert html.startswith("<!DOCTYPE html>") and '"stepscope-data"' in html
    assert json.loads(stepscope.report(run, "json"))["schema"] == "stepscope.report/1"
    with pytest.raises(StepscopeError, match="unknown report format"):
        stepscope.report(rep, "pdf")


def test_the_face_names_the_error_tree_and_the_version() -> None:
    assert stepscope.__version__ == __version__
    assert issubclass(stepscope.RunError, StepscopeError) and stepscope.RunError is RunError
    assert stepscope.TraceFormatError is TraceFormatError
    assert set(stepscope.__all__) >= {"record", "step", "load", "analyze", "report",
                                      "StepscopeError", "__version__"}
    for name in stepscope.__all__:
        assert getattr(stepscope, name) is not None
