"""``Profile``: one run, for Python and notebooks (``stepscope.load(path)``).

Each question is a method that returns a ``pyarrow.Table`` (``to="pandas"`` / ``"polars"`` for
a data frame, when installed): ``steps()``, ``breakdown()``, ``kernels()``, ``copies()``,
``syncs()``, ``collectives()``, ``findings()``, ``remedies()``, ``plan()``, ``diff(other)``. The run is
analysed once, on the first question (``analyze()`` gives that ``Report`` itself), and
``report(format)`` renders it as the command line does. In Jupyter the profile shows itself as
the overview card and the findings (``reporters.notebook_html``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

import stepscope.notebook.diffs as diffs
import stepscope.notebook.tables as tables
from stepscope.compare import Diff, Side, compare
from stepscope.errors import StepscopeError
from stepscope.notebook.frames import convert
from stepscope.notebook.sources import Opened, open_source
from stepscope.reporters.report import Report, build_report
from stepscope.store.manifest import Manifest
from stepscope.store.run import Run

FORMATS = ("text", "json", "html")


class Profile:
    """A run opened for questions (module docstring). Holds the run and, once asked, its
    report; nothing else changes after it is made."""

    def __init__(self, opened: Opened) -> None:
        self.opened = opened
        self.run = Run(opened.path)
        self._report: Report | None = None
        self._dict: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        """The run folder."""
        return self.opened.path

    @property
    def note(self) -> str:
        """What was read and where the run is (an imported trace says where it was written)."""
        return self.opened.note

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.run.ranks

    @property
    def manifest(self) -> Manifest:
        return self.run.manifest

    def __repr__(self) -> str:
        return f"Profile({str(self.path)!r}, ranks={self.ranks})"

    def analyze(self) -> Report:
        """The run's analysis and advice (built on the first call, then kept)."""
        if self._report is None:
            self._report = build_report(self.run)
        return self._report

    def _json(self) -> Mapping[str, Any]:
        if self._dict is None:
            from stepscope.reporters.json_report import report_dict

            self._dict = report_dict(self.analyze())
        return self._dict

    def steps(self, *, to: str = "arrow") -> Any:
        """Every step of every rank: its window, GPU busy time, whether it is steady, and its
        breakdown (``<category>_ms``, summing to ``wall_ms``)."""
        return convert(tables.steps(self._json()), to)

    def breakdown(self, *, to: str = "arrow") -> Any:
        """Per rank and category: mean ms per steady step and its share of the step."""
        return convert(tables.breakdown(self.analyze()), to)

    def kernels(self, *, to: str = "arrow") -> Any:
        """The top kernels by time over the steady steps, with launch configuration,
        occupancy, SM coverage, tensor cores, precision and category."""
        return convert(tables.kernels(self._json()), to)

    def copies(self, *, to: str = "arrow") -> Any:
        """Copies per rank and direction: count, bytes, bandwidth, pageable/pinned, overlap."""
        return convert(tables.copies(self._json()), to)

    def syncs(self, *, to: str = "arrow") -> Any:
        """Host-device sync points per call site: kind, API, frame/op, count, blocked time."""
        return convert(tables.syncs(self._json()), to)

    def collectives(self, *, to: str = "arrow") -> Any:
        """Collectives across ranks, per kind (empty, with a note, for a run of one rank)."""
        return convert(tables.collectives(self._json()), to)

    def findings(self, *, to: str = "arrow") -> Any:
        """The advisor's findings, ranked by estimated saving per step, with the fix."""
        return convert(tables.findings(self.analyze(), self._json()), to)

    def remedies(self, *, to: str = "arrow") -> Any:
        """What to change and the predicted step after it, each remedy alone, where this
        version predicts it (else empty, with a note: :func:`stepscope.notebook.note`)."""
        return convert(tables.remedies(self._json()), to)

    def plan(self, *, to: str = "arrow") -> Any:
        """Every remedy that helps, replayed together: the predicted step (one row)."""
        return convert(tables.plan(self._json()), to)

    def plan_subsets(self, *, to: str = "arrow") -> Any:
        """The plan restricted to subsets of its remedies, each replayed together (every
        pair at least): a row per subset (``remedy_ids``, ``predicted_step_ms``...)."""
        return convert(tables.plan_subsets(self._json()), to)

    def compare(self, other: Profile | Report | str | os.PathLike[str], *,
                confidence: float = 0.95, margin_pct: float = 2.0) -> Diff:
        """``other`` (NEW) against this profile (BASE), as the frozen ``Diff``."""
        mine = self.analyze()
        theirs = _report_of(other)
        return compare([Side(str(self.path), mine.analysis, mine.advice)],
                       [Side(str(theirs.run_path), theirs.analysis, theirs.advice)],
                       confidence=confidence, margin_pct=margin_pct)

    def diff(self, other: Profile | Report | str | os.PathLike[str], *, to: str = "arrow",
             confidence: float = 0.95, margin_pct: float = 2.0) -> Any:
        """``other`` (NEW: a profile, a report, or a path ``load`` takes) against this one:
        a row per change (``notebook.diffs``); the verdict in the metadata
        (:func:`stepscope.notebook.verdict`)."""
        d = self.compare(other, confidence=confidence, margin_pct=margin_pct)
        return convert(diffs.diff_table(d), to)

    def report(self, format: str = "text") -> str:
        """The report as the command line renders it: ``text``, ``json`` or ``html``."""
        if format not in FORMATS:
            raise StepscopeError(f"unknown report format {format!r} (one of "
                                 f"{', '.join(FORMATS)})")
        if format == "json":
            from stepscope.reporters.json_report import to_json

            return to_json(self.analyze())
        if format == "html":
            from stepscope.reporters.html import to_html

            return to_html(build_report(self.run, page=True))
        from stepscope.reporters.terminal import render_text

        return render_text(self.analyze())

    def _repr_html_(self) -> str:
        from stepscope.reporters.notebook_html import card_html

        o = self.opened
        note = f"{o.how} from {o.traces}" if o.traces is not None else ""
        return card_html(self.analyze(), note=note)


def load(path: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
         overwrite: bool = False) -> Profile:
    """A profile of ``path``: a run folder, or traces imported first (``notebook.sources``)."""
    return Profile(open_source(path, out=out, overwrite=overwrite))


def _report_of(x: Profile | Report | str | os.PathLike[str]) -> Report:
    if isinstance(x, Profile):
        return x.analyze()
    if isinstance(x, Report):
        return x
    if isinstance(x, (str, os.PathLike)):
        return load(x).analyze()
    raise StepscopeError(f"diff takes a profile, a report or a path, not {type(x).__name__}")


def note(table: pa.Table) -> str:
    """The caveat a table of a profile carries ("" when none)."""
    return tables.note_of(table)


def verdict(table: pa.Table) -> str:
    """faster / slower / same / inconclusive, from a table of :meth:`Profile.diff`."""
    meta = table.schema.metadata or {}
    return bytes(meta.get(diffs.VERDICT_KEY, b"")).decode()
