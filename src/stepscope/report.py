"""The one object every reporter takes: a run, its analysis and its advice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepscope.advisor import Advice, advise
from stepscope.analysis import Analysis, analyze
from stepscope.store.manifest import Manifest
from stepscope.store.run import Run

REPORT_SCHEMA = "stepscope.report/1"


@dataclass(frozen=True)
class Report:
    run_path: Path
    manifest: Manifest
    analysis: Analysis
    advice: Advice


def build_report(run: Run) -> Report:
    analysis = analyze(run)
    return Report(run_path=run.path, manifest=run.manifest, analysis=analysis,
                  advice=advise(run, analysis))
