"""stepscope: why is my GPU training step slow, and what should I change?

The face, for Python:

* ``record(out, ...)`` / ``step()``: capture this process (``with stepscope.record("run"):``),
  marking steps where no optimizer hook does (:class:`Recording`);
* ``load(path)``: a run folder, opened; or traces (a Kineto ``.json``/``.json.gz`` file, an
  XSpace, nsys or ncu export, a folder of rank files, a TensorBoard log folder), imported into
  a run folder first: a :class:`stepscope.notebook.Profile`, whose methods answer with Arrow
  tables (``steps()``, ``breakdown()``, ``kernels()``, ``findings()``, ``diff(other)``...);
* ``stepscope.torch``: ``on_trace_ready(dir)`` and ``profile(...)`` for ``torch.profiler``;
* ``analyze(run)``: the run's analysis and the advice on it, as one ``Report``;
* ``report(run, format)``: that report rendered as text, JSON or HTML;
* ``diff(base, new)``: NEW against BASE (runs, traces or reports; one or several per side):
  faster / slower / same / inconclusive, and where the change came from (``compare.Diff``);
* the error tree: every error stepscope raises is a :class:`StepscopeError`.

``import stepscope`` stays cheap (no numpy/pyarrow, nothing of the capture) for the command
line: the capture, the store and the analysis are imported on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope._version import __version__
from stepscope.errors import (
    CaptureError,
    QueryError,
    RunError,
    StepscopeError,
    TraceFormatError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from stepscope.compare import Diff, Side
    from stepscope.notebook import Profile
    from stepscope.recording import Recording, record, step
    from stepscope.reporters.report import Report
    from stepscope.store.run import Run

__all__ = ["CaptureError", "Profile", "QueryError", "Recording", "RunError", "StepscopeError",
           "TraceFormatError", "__version__", "analyze", "diff", "load", "record", "report",
           "step"]

_LAZY = {"Recording": "stepscope.recording", "record": "stepscope.recording",
         "step": "stepscope.recording", "Profile": "stepscope.notebook"}
_SUBMODULES = ("torch", "notebook")
FORMATS = ("text", "json", "html")


def __getattr__(name: str) -> Any:
    """``Recording``, ``record``, ``step`` and ``Profile``, and the ``torch`` and ``notebook``
    modules, imported on first use (module docstring)."""
    if name in _LAZY or name in _SUBMODULES:
        import importlib

        if name in _SUBMODULES:  # stepscope.torch / stepscope.notebook without importing them
            return importlib.import_module(f"stepscope.{name}")
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stepscope' has no attribute {name!r}")


def load(path: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
         overwrite: bool = False) -> Profile:
    """A :class:`stepscope.notebook.Profile` of ``path``: a run folder opened as it is, or
    traces (a Kineto ``.json[.gz]``, ``.xplane.pb``, an nsys ``.sqlite``, an ncu CSV, a folder
    of rank files, a TensorBoard log folder) imported into ``out`` (default: the sibling
    ``<name>.stepscope``, as ``stepscope import`` does; reused when it is an import of the
    same traces; ``overwrite`` replaces a run already there). Its methods answer with Arrow
    tables: ``steps()``, ``breakdown()``, ``kernels()``, ``findings()``, ``diff(other)``..."""
    from stepscope.notebook import load as load_profile

    return load_profile(path, out=out, overwrite=overwrite)


def analyze(run: Run | Profile | str | os.PathLike[str], *, page: bool = False,
            untraced_step_ms: float | None = None) -> Report:
    """The analysis of ``run`` (a ``Run`` or anything :func:`load` takes) and the advice on it;
    with ``page``, also what the HTML report shows beyond them; with ``untraced_step_ms`` (the
    program's step time without the profiler), the remedies calibrated to it
    (``stepscope report --untraced-step-ms``)."""
    from stepscope.reporters.report import build_report

    return build_report(_as_run(run), page=page, untraced_step_ms=untraced_step_ms)


def _as_run(run: Run | Profile | str | os.PathLike[str]) -> Run:
    """The ``Run`` of a run, a profile or a path (a path is opened or imported by load)."""
    if isinstance(run, (str, os.PathLike)):
        return load(run).run
    from stepscope.notebook import Profile

    return run.run if isinstance(run, Profile) else run


def report(run: Report | Run | Profile | str | os.PathLike[str], format: str = "text") -> str:
    """``run``'s report (or a ``Report`` of :func:`analyze`) rendered as ``text``, ``json`` or
    ``html`` (a self-contained page)."""
    if format not in FORMATS:
        raise StepscopeError(f"unknown report format {format!r} (one of {', '.join(FORMATS)})")
    from stepscope.reporters.report import Report

    if not isinstance(run, Report):
        rep = analyze(run, page=format == "html")
    elif format == "html" and run.page is None:
        rep = analyze(run.run_path, page=True)
    else:
        rep = run
    if format == "json":
        from stepscope.reporters.json_report import to_json

        return to_json(rep)
    if format == "html":
        from stepscope.reporters.html import to_html

        return to_html(rep)
    from stepscope.reporters.terminal import render_text

    return render_text(rep)


RunLike = Any  # a Report, a Run, or a path to a run folder or to trace(s)


def diff(base: RunLike | Sequence[RunLike], new: RunLike | Sequence[RunLike], *,
         confidence: float = 0.95, margin_pct: float = 2.0) -> Diff:
    """NEW against BASE (docs/diff.md): each a ``Report`` of :func:`analyze`, a ``Run``, a run
    folder, a trace file or folder (imported into a temporary folder, removed afterwards), or
    a list of those (several runs per side, their steady steps pooled). The result is a frozen
    :class:`stepscope.compare.Diff`; render it with ``stepscope.reporters.diff_json`` /
    ``diff_terminal`` / ``diff_html``."""
    import tempfile

    from stepscope.compare import compare

    with tempfile.TemporaryDirectory(prefix="stepscope-diff-") as tmp:
        sides = [[_side(x, Path(tmp) / f"{name}{i}") for i, x in enumerate(_runs(given))]
                 for name, given in (("base", base), ("new", new))]
        return compare(sides[0], sides[1], confidence=confidence, margin_pct=margin_pct)


def _runs(given: RunLike | Sequence[RunLike]) -> list[RunLike]:
    if isinstance(given, (list, tuple)):
        if not given:
            raise StepscopeError("diff needs at least one run on each side")
        return list(given)
    return [given]


def _side(x: RunLike, scratch: Path) -> Side:
    from stepscope.compare import Side
    from stepscope.notebook import Profile
    from stepscope.reporters.report import Report, build_report
    from stepscope.store.run import Run

    if isinstance(x, Report):
        return Side(str(x.run_path), x.analysis, x.advice)
    if isinstance(x, Profile):
        rep = x.analyze()
        return Side(str(x.path), rep.analysis, rep.advice)
    if isinstance(x, Run):
        run = x
    elif isinstance(x, (str, os.PathLike)):
        p = Path(x)
        if (p / "manifest.json").is_file():
            run = Run(p)
        else:
            from stepscope.importers import import_traces

            run = Run(import_traces([p], scratch))
    else:
        raise StepscopeError(f"diff takes runs, run folders or traces, not {type(x).__name__}")
    rep = build_report(run)
    label = str(x) if isinstance(x, (str, os.PathLike)) else str(run.path)
    return Side(label, rep.analysis, rep.advice)
