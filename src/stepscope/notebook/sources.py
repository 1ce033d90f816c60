"""What ``stepscope.load(path)`` opens, and where it writes.

* a run folder (it holds ``manifest.json``): opened as it is, nothing written;
* anything else is imported as ``stepscope import`` would (a Kineto ``.json``/``.json.gz``, an
  XSpace ``.xplane.pb``, an Nsight Systems ``.sqlite[.gz]`` export, a folder of rank files, a
  TensorBoard log folder with its ``plugins/profile/<run>/``, an Nsight Compute CSV export):
  into ``out`` when given, else into the sibling ``<name>.stepscope`` (the name
  ``stepscope import`` would pick), else, where the sibling's folder is not writable, into a
  new temporary folder (kept: the profile still reads it; :attr:`Opened.note` says where).

Nothing of the user's is overwritten: a run folder (``out`` or the sibling) that already
exists is reused when it is a stepscope run imported from these very traces and newer than
them (a notebook cell run again), and refused otherwise unless ``overwrite`` (which replaces
only a stepscope run that does not hold the traces).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stepscope.errors import RunError, StepscopeError
from stepscope.importers import import_traces, run_folder_for
from stepscope.importers.ncu import import_profiles, is_ncu_file
from stepscope.store.manifest import MANIFEST_NAME, read_manifest
from stepscope.store.writer import check_replaceable


@dataclass(frozen=True)
class Opened:
    """Where the run is, and how it came to be there."""

    path: Path  # the run folder
    traces: Path | None  # what was imported (None: ``path`` was a run already)
    how: str  # "opened" | "imported" | "reused" | "imported (temporary)"

    @property
    def note(self) -> str:
        """One line for the user: what was read and where the run is."""
        if self.traces is None:
            return f"run {self.path}"
        if self.how == "reused":
            return f"run {self.path} (imported from {self.traces} before; reused)"
        return f"run {self.path} ({self.how} from {self.traces})"


def is_run(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file()


def open_source(path: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
                overwrite: bool = False) -> Opened:
    """The run for ``path`` (module docstring)."""
    p = Path(path)
    if is_run(p):
        return Opened(p, None, "opened")
    if not p.exists():
        raise RunError(f"{p}: no such file or folder")
    target = Path(out) if out is not None else run_folder_for(p)
    how = "imported"
    if is_run(target) and not overwrite:
        if _imported_from(target, p):
            return Opened(target, p, "reused")
        raise RunError(f"{target}: already exists and is not an import of {p} newer than it; "
                       f"pass out=... for another folder or overwrite=True")
    if out is None and not os.access(target.parent, os.W_OK):
        target = Path(tempfile.mkdtemp(prefix="stepscope-")) / target.name
        how = "imported (temporary)"
    if overwrite:
        check_replaceable(target, [p])  # never delete a folder that is not a run, or the trace
    _import(p, target, overwrite)
    return Opened(target, p, how)


def _import(p: Path, target: Path, overwrite: bool) -> None:
    if p.is_file() and is_ncu_file(p):
        import_profiles([p], target, overwrite=overwrite)
    else:
        import_traces([p], target, overwrite=overwrite)


def _imported_from(run: Path, given: Path) -> bool:
    """Whether the run at ``run`` was imported from ``given`` (a file, or files under a folder)
    and is newer than every one of them."""
    try:
        files = read_manifest(run).source.files
        made = (run / MANIFEST_NAME).stat().st_mtime
        root = given.resolve()
        if not files:
            return False
        for f in files:
            src = Path(f).resolve()
            if not (src == root or root in src.parents) or src.stat().st_mtime > made:
                return False
    except (OSError, StepscopeError):
        return False
    return True
