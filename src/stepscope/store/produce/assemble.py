"""The one run assembler: rank bundles from any source -> tables, manifest, a finished run.

>>> assemble(out, bundles, lambda facts: Manifest(source=..., ranks=()))  # doctest: +SKIP

``stepscope import`` (``importers.import_traces``) and the merge of a capture
(``capture.partitions.merge``) both end here. Each bundle's tables are written through
``RunWriter`` (which checks their columns) as they come, one bundle at a time (tables a worker
wrote already, a bundle's ``staged`` files with their collectives completed by the worker
(``collectives.with_collectives``), are checked the same way and moved in); its
``collectives`` go last, through ``collectives.complete`` (linked to the rank's NCCL/RCCL
kernels, or made from them when the source gave none). Each bundle is then checked against
what its kind of source must provide (``schema.CONTRACTS``), a gap becoming a
``missing_tables`` diagnostic; a rank given twice is refused. The manifest's ranks and
per-rank diagnostics come from the bundles; the rest (what the run's source was, its settings,
overhead, run-wide diagnostics) from the caller's ``head``, asked once every table is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from stepscope.errors import RunError
from stepscope.progress import report as say_progress
from stepscope.store.manifest import Diagnostic, Manifest
from stepscope.store.produce.bundle import RankBundle, contract_gaps, gap_diagnostic
from stepscope.store.produce.collectives import communication_kernels, complete
from stepscope.store.writer import RunWriter

# told of each table as it is written: (rank, table name, the table)
TableObserver = Callable[[int, str, pa.Table], None]
# the manifest's run-wide part, from the bundles written (their facts: tables left out)
ManifestHead = Callable[[Sequence[RankBundle]], Manifest]


def assemble(out: str | os.PathLike[str], bundles: Iterable[RankBundle], head: ManifestHead, *,
             overwrite: bool = False, inputs: Iterable[str | os.PathLike[str]] = (),
             on_table: TableObserver | None = None) -> Path:
    """Write ``bundles`` as the run ``out`` (atomically: on an error nothing is left there)
    and return its path. ``overwrite``/``inputs``: as ``RunWriter``'s."""
    with RunWriter(out, overwrite=overwrite, inputs=inputs) as writer:
        facts: list[RankBundle] = []
        seen: dict[int, RankBundle] = {}
        for bundle in bundles:
            r = bundle.rank.rank
            if r in seen:
                raise RunError(f"rank {r} given twice ({seen[r].rank.file or 'a source'} and "
                               f"{bundle.rank.file or 'another'}): a run has one of each rank")
            rows: dict[str, int] = {}
            what = f"writing rank {r}'s tables"
            given: pa.Table | None = None  # the source's collectives, completed at the end
            comm = communication_kernels({})
            total = len(bundle.tables) + len(bundle.staged)
            for i, name in enumerate(bundle.tables):
                say_progress(what, i, total)
                table = bundle.tables[name]
                if name == "collectives":
                    given = table
                    continue
                rows[name] = writer.write(name, r, table)
                if on_table is not None:
                    on_table(r, name, table)
                if name == "kernels":
                    comm = communication_kernels(table)
                del table  # one table in memory at a time
            for i, (name, path) in enumerate(bundle.staged.items(), len(bundle.tables)):
                say_progress(what, i, total)  # written by a worker, collectives completed
                if name in rows:
                    raise RunError(f"{path}: rank {r}'s {name} given twice")
                rows[name] = writer.adopt(name, r, path)
                if on_table is not None:
                    on_table(r, name, writer.table(name, r))
            done = complete(given, comm, r)
            if done is not None or given is not None:
                table = done if done is not None else given
                rows["collectives"] = writer.write("collectives", r, table)
                if on_table is not None:
                    on_table(r, "collectives", table)
                del table
            say_progress(what, total, total)
            talked = comm.num_rows > 0 or "collectives" in bundle.staged
            missing = contract_gaps(bundle.kind, rows, communication=talked)
            gaps = (gap_diagnostic(bundle, missing),) if missing else ()
            fact = dataclasses.replace(bundle, tables={}, staged={},
                                       diagnostics=(*bundle.diagnostics, *gaps))
            seen[r] = fact
            facts.append(fact)
        base = head(facts)
        ranks = tuple(f.rank for f in sorted(facts, key=lambda f: f.rank.rank))
        diags: list[Diagnostic] = [*base.diagnostics, *(d for f in facts for d in f.diagnostics)]
        return writer.finish(dataclasses.replace(base, ranks=ranks, diagnostics=tuple(diags)))


__all__ = ["ManifestHead", "TableObserver", "assemble"]
