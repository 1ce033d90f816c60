"""The one producer contract: a rank's tables and facts, as every source hands them to the store.

Capture's merge (``capture.partitions``) and every importer (``importers.FORMATS``) end in
``RankBundle`` values, which ``store.produce.assemble`` writes as one run. A bundle says what
kind of source made it (``schema_enums.SourceKind``), so that the assembler can check it against the
tables that kind must provide (``schema.CONTRACTS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from stepscope.schema import GPU_ACTIVITY_TABLES, required_tables
from stepscope.schema_enums import SourceKind
from stepscope.store.manifest import Diagnostic, RankInfo


@dataclass(frozen=True)
class RankBundle:
    """One rank's tables and what the manifest needs to know about where they came from.

    ``tables`` may be lazy (a ``Mapping`` that reads each table when it is looked up: capture
    holds one table of one process in memory at a time); the assembler looks each up once.
    ``tool``, ``clock_offset_ns`` and ``details``: the source's own facts about this rank (an
    imported file's producer, the offset added to its timestamps, what was read).
    ``staged``: tables already written as partition files (``store.writer.write_partition``) by
    another process (a worker of a rank-parallel import), table -> file; the assembler checks
    and adopts them (``RunWriter.adopt``) instead of writing them, so they never travel.
    """

    kind: SourceKind
    rank: RankInfo
    tables: Mapping[str, pa.Table]
    diagnostics: tuple[Diagnostic, ...] = ()
    tool: str = ""
    clock_offset_ns: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)
    staged: Mapping[str, Path] = field(default_factory=dict)


class TraceReader(Protocol):
    """Reads one trace file as one rank's bundle (an importer's entry point, ``importers``);
    ``default_rank``: the rank when the file does not say. Raises ``TraceFormatError``."""

    def __call__(self, path: Path, *, default_rank: int) -> RankBundle: ...


def gpu_activity(rows: Mapping[str, int]) -> bool:
    """Whether a rank whose tables have ``rows`` (table -> row count) saw GPU activity."""
    return any(rows.get(t, 0) > 0 for t in GPU_ACTIVITY_TABLES)


def contract_gaps(kind: SourceKind, rows: Mapping[str, int], *,
                  communication: bool = False) -> tuple[str, ...]:
    """The tables a rank of ``kind`` with ``rows`` (table -> rows written) must provide and
    lacks (``schema.CONTRACTS``); ``communication``: the rank ran NCCL/RCCL kernels."""
    need = required_tables(kind, gpu_activity(rows), communication)
    return tuple(t for t in need if rows.get(t, 0) <= 0)


def gap_diagnostic(bundle: RankBundle, missing: tuple[str, ...]) -> Diagnostic:
    """What a run says about a rank that lacks tables its kind of source must provide."""
    r = bundle.rank
    tables = ", ".join(missing)
    return Diagnostic(
        "warning", "missing_tables",
        f"rank {r.rank} ({bundle.kind.value} source) has GPU activity but no {tables} "
        f"table{'s' if len(missing) > 1 else ''}, which such a source must provide: the "
        "analyses and rules that need "
        f"{'them' if len(missing) > 1 else 'it'} are skipped",
        file=r.file or f"rank {r.rank}", count=len(missing))


__all__ = ["RankBundle", "TraceReader", "contract_gaps", "gap_diagnostic", "gpu_activity"]
