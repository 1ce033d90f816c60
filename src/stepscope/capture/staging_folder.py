"""The staging folder of a run being recorded: ``.<RUN name>.staging-<pid>-<time ns>-<random>``,
next to RUN, where the captured processes write their partitions (``capture.staging``) until the
merge writes the run.

One live recording per RUN: :func:`claim` removes the staging folders of recordings that are gone
(killed with SIGKILL, so they could not clean up) and stops the later of two live ones, so that two
``record -o RUN`` (or ``stepscope.record(out=RUN)``) do not both run for minutes and lose a capture.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from stepscope.errors import CaptureError, RunError, StepscopeError


def make_staging(out: Path) -> Path:
    """A new staging folder for the run ``out``, claimed (:func:`claim`)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{staging_prefix(out)}{os.getpid()}-"
                                               f"{time.time_ns()}-", dir=out.parent))
    except OSError as exc:
        raise CaptureError(f"{out.parent}: cannot create the staging folder ({exc.strerror})") from None
    try:
        claim(out, staging)
    except StepscopeError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def staging_prefix(out: Path) -> str:
    """``.<RUN name>.staging-``: the staging folders of ``record -o RUN`` are named
    ``<prefix><pid>-<time ns>-<random>``, next to RUN."""
    return f".{out.name}.staging-"


def claim(out: Path, staging: Path) -> None:
    """Make ``staging`` the only live staging folder of ``out``, before the program starts.

    A staging folder whose ``stepscope record`` is gone (killed with SIGKILL, so it could not
    clean up) is removed. Another live one means a second ``record -o`` the same RUN: the later
    of the two (by the time in the name) stops with ``RunError``, so that both do not run the
    program for minutes and then lose one capture."""
    mine = _staging_key(staging)
    prefix = staging_prefix(out)
    try:
        siblings = list(out.parent.iterdir())  # not glob: RUN's name may hold [ ] * ?
    except OSError:  # a folder we may write but not list: nothing to compare with
        return
    for other in siblings:
        key = _staging_key(other) if other.name.startswith(prefix) else None
        if other == staging or key is None or not other.is_dir() or other.is_symlink():
            continue  # not one of ours (an older stepscope names them without the pid)
        pid = key[1]
        if not _alive(pid):
            shutil.rmtree(other, ignore_errors=True)
        elif mine is not None and key < mine:
            raise RunError(f"{out}: another stepscope record (pid {pid}) is writing this run; "
                           "choose another -o")


def _staging_key(folder: Path) -> tuple[int, int] | None:
    """(time ns, pid) from a staging folder's name, or None."""
    parts = folder.name.rsplit(".staging-", 1)[-1].split("-")
    if len(parts) < 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[1]), int(parts[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
