"""One rank's share of a rank-parallel import, the same on every engine: read one trace file,
write its tables as partition files into the import's parts folder, return the small facts.

``stage_rank`` runs in a worker process (``engines``: a local process pool, or Dask workers on
other machines sharing the run's file system). Its tables never travel back: the worker writes
them (``store.writer.write_partition``, exactly as the run writer would) and the parent's run
assembler checks and adopts the files (``RunWriter.adopt``). What travels back is a
``StagedRank`` (the bundle without its tables, and the facts that tell ranks of one job apart)
or a ``RankFailure`` (a ``StepscopeError``, which does not survive pickling as itself).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

from stepscope.errors import (
    CaptureError,
    DamagedFileError,
    QueryError,
    RunError,
    StepscopeError,
    TraceFormatError,
)
from stepscope.importers.registry import FORMATS
from stepscope.importers.trace_sets import FileFacts, facts
from stepscope.store.produce import RankBundle
from stepscope.store.produce.collectives import with_collectives
from stepscope.store.writer import write_partition


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to read one file: the file, its format (``registry.FORMATS``), the
    rank when the file does not say (its place in the set, as the serial import gives), the
    import's parts folder and the run being written (for messages)."""

    path: Path
    format: str
    default_rank: int
    parts: Path
    run: str


@dataclass(frozen=True)
class StagedRank:
    """A rank read and written: its bundle (``tables`` empty, ``staged`` naming the files) and
    its ``FileFacts``."""

    bundle: RankBundle
    facts: FileFacts


@dataclass(frozen=True)
class RankFailure:
    """A ``StepscopeError`` raised in a worker, carried back as data and raised again, the same
    class and message, in the parent (``raise_``)."""

    error: str  # the class name in stepscope.errors
    message: str
    path: str = ""  # TraceFormatError's
    problem: str = ""

    @staticmethod
    def of(exc: StepscopeError) -> RankFailure:
        if isinstance(exc, TraceFormatError):
            return RankFailure(type(exc).__name__, str(exc), exc.path, exc.problem)
        return RankFailure(type(exc).__name__, str(exc))

    def exception(self) -> StepscopeError:
        if self.error in (TraceFormatError.__name__, DamagedFileError.__name__):
            trace = DamagedFileError if self.error == DamagedFileError.__name__ \
                else TraceFormatError
            return trace(self.path, self.problem)
        cls = next((c for c in _PLAIN if c.__name__ == self.error), StepscopeError)
        return cls(self.message)

    def raise_(self) -> NoReturn:
        raise self.exception()


_PLAIN = (RunError, QueryError, CaptureError, StepscopeError)  # errors of one message


class Result(Protocol):
    """A per-rank result to come, on any engine (``concurrent.futures.Future``,
    ``distributed.Future``)."""

    def result(self) -> Any: ...


Submit = Callable[[RankTask], Result]  # an engine: runs ``stage_rank`` on a task


def part_folder(task: RankTask) -> Path:
    """Where the worker reading the task's file writes its tables (one folder per file)."""
    return task.parts / f"file-{task.default_rank}"


def stage_rank(task: RankTask) -> StagedRank | RankFailure:
    """Read ``task.path`` as one rank and write its tables into its part folder (the per-rank
    work of a rank-parallel import, on any engine)."""
    try:
        bundle = FORMATS[task.format].read(task.path, default_rank=task.default_rank)
        r = bundle.rank.rank
        fact = facts(task.path, r, bundle.details.get("rank_source") == "distributedInfo",
                     bundle.rank.pid, bundle.rank.world_size, bundle.tables)
        folder = part_folder(task)
        staged: dict[str, Path] = {}
        try:
            folder.mkdir()  # not parents: a parts folder removed means the import is over
            tables = with_collectives(bundle.tables, r)  # the assembler adopts them as they are
            for name in list(tables):
                dest = folder / f"{name}.parquet"
                if write_partition(dest, name, r, tables[name]):
                    staged[name] = dest
            del tables
        except OSError as exc:
            if not task.parts.exists():  # the import ended (an error elsewhere): leave nothing
                shutil.rmtree(folder, ignore_errors=True)
            raise RunError(f"{task.run}: cannot write the run "
                           f"({exc.strerror or type(exc).__name__})") from None
        return StagedRank(dataclasses.replace(bundle, tables={}, staged=staged), fact)
    except StepscopeError as exc:
        return RankFailure.of(exc)


__all__ = ["RankFailure", "RankTask", "Result", "StagedRank", "Submit", "part_folder",
           "stage_rank"]
