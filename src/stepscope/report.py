"""The one object every reporter takes: a run, its analysis and its findings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.analysis import Analysis, analyze
from stepscope.store.manifest import Manifest
from stepscope.store.run import Run

REPORT_SCHEMA = "stepscope.report/1"


@dataclass(frozen=True)
class Report:
    run_path: Path
    manifest: Manifest
    analysis: Analysis
    # Ranked findings from the advisor. The advisor (rule engine) is not part of
    # this release yet, so this is always empty; the JSON contract already has it.
    findings: tuple[Any, ...] = ()
    skipped_rules: tuple[Any, ...] = ()


def build_report(run: Run) -> Report:
    return Report(run_path=run.path, manifest=run.manifest, analysis=analyze(run))
