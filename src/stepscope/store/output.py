"""Write one output file (a report, an exported trace) the way users expect of a command line tool.

- Atomically: the content goes to a temporary sibling that is renamed over the file when it is
  complete, so a full disk or an error leaves the old file (or none), never half a file.
- With the mode a new file gets from the umask (``0666 & ~umask``); a file that is replaced keeps
  its mode. ``tempfile.mkstemp`` alone would leave every output private (0600).
- A symbolic link is followed, not replaced: the file it names is written and the link stays.
- A path that is not a regular file (``/dev/stdout``, ``/dev/null``, a pipe) is written in place;
  no temporary file is made next to it (in ``/dev`` that would be wrong, and as root possible).

Every failure is a ``StepscopeError`` naming the path and the problem.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from stepscope.errors import StepscopeError

T = TypeVar("T")


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_output(path: str | os.PathLike[str], write: Callable[[IO[bytes]], T]) -> T:
    """Call ``write`` with a binary file that becomes ``path`` when it returns; returns what
    ``write`` returns."""
    given = Path(path)
    target = given.resolve() if given.is_symlink() else given
    try:
        st: os.stat_result | None = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise StepscopeError(f"{given}: cannot write ({exc.strerror})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise StepscopeError(f"{given}: is a folder; give a file name")
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):  # a device or a pipe: in place
            with open(target, "wb") as fh:
                return write(fh)
        return _replace(target, st, write)
    except OSError as exc:
        raise StepscopeError(f"{given}: cannot write ({exc.strerror or exc})") from None


def _replace(target: Path, st: os.stat_result | None, write: Callable[[IO[bytes]], T]) -> T:
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            result = write(fh)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return result


def check_not_in_run(path: str | os.PathLike[str], run_dir: Path) -> None:
    """Refuse an output that is one of the run's own files (``report RUN -o RUN/manifest.json``
    would replace the manifest with the report and destroy the run)."""
    out = Path(path).resolve()
    run = run_dir.resolve()
    if out == run / "manifest.json" or (out.parent.parent == run and out.name.startswith("rank-")
                                        and out.suffix == ".parquet"):
        raise StepscopeError(f"{path}: a file of the run {run_dir}; write the output elsewhere")


def write_text_output(path: str | os.PathLike[str], text: str) -> Path:
    """``text`` (UTF-8) to ``path``, as :func:`write_output` does."""
    data = text.encode("utf-8")
    write_output(path, lambda fh: fh.write(data))
    return Path(path)


__all__ = ["check_not_in_run", "current_umask", "write_output", "write_text_output"]
