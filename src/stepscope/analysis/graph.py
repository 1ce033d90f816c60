"""The step graph: a run's events as columns, with their links, built once per run.

This is the only module of the analysis that reads a run's tables: every other analysis
(and the model and the advisor above it) is a function of a :class:`StepGraph`.

A ``StepGraph`` is one rank's events (``rank=None``: every rank's, concatenated, as the
run's tables are) with the links between them, each computed once, when first asked:

* **GPU records** (:attr:`StepGraph.gpu`): kernels, memcpy and memset records concatenated
  in that order (start, end, device, correlation, kind), the rows of each table first;
* **API call <-> GPU records by correlation id** (:meth:`StepGraph.api_row`,
  :meth:`StepGraph.memcpy_row`, :attr:`StepGraph.gpu_by_correlation`,
  :attr:`StepGraph.issued_ns`): the one join of the run's correlation ids. A correlation
  of an API call pairs with every GPU record carrying it (a graph launch issues many); a
  GPU record pairs with the first API call (in table order) carrying its correlation.
  Null and negative correlations pair with nothing;
* **op <-> API call by nesting** (:meth:`StepGraph.enclosing_op`): the innermost (or
  outermost) ``cpu_ops`` row of a kind enclosing each API call on the same ``(pid, tid)``;
* input waits, syncs, and the order on each stream and thread are columns of the tables
  (``input_waits``; ``sync`` and ``api_calls`` of kind ``sync``; ``ts_ns`` within
  ``(device, stream)`` and ``(pid, tid)``); the analyses read them through
  :meth:`StepGraph.table`. Each event's step is assigned by the analyses against the
  step windows (``intervals.assign_to_windows``).

:func:`run_graph` builds the graph of a run once per ``Run`` object (``Run.derived``), so
every consumer of one run (the analysis, the advisor, the reporters) shares its tables,
its links and the results memoised on it (:meth:`StepGraph.memo`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.intervals import I64
from stepscope.store.frameworks import run_frameworks
from stepscope.store.manifest import Manifest
from stepscope.store.run import Run

T = TypeVar("T")
GPU_TABLES = ("kernels", "memcpy", "memset")


_RANK_SHIFT = np.int64(1) << np.int64(40)


def _i64(t: pa.Table, name: str, fill: int) -> I64:
    if t.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    col = t.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def correlation_keys(t: pa.Table) -> I64:
    """Each row's correlation made unique across ranks (``rank << 40 | correlation``); -1
    where the correlation is null or negative."""
    corr = _i64(t, "correlation", -1)
    rank = _i64(t, "rank", 0)
    return np.where(corr >= 0, rank * _RANK_SHIFT + corr, -1).astype(np.int64)


@dataclass(frozen=True)
class CorrelationIndex:
    """The first row (in table order) of each distinct non-negative correlation id of a
    table: the one correlation join, used in both directions."""

    keys: I64  # sorted distinct correlation keys (:func:`correlation_keys`)
    rows: I64  # the first row carrying each

    @staticmethod
    def of(corr: I64) -> CorrelationIndex:
        order = np.argsort(corr, kind="stable")
        sc = corr[order]
        keep = sc >= 0
        sc, order = sc[keep], order[keep]
        if sc.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return CorrelationIndex(z, z.copy())
        # sc is sorted already (stable: equal keys in row order): the first of each run
        first = np.flatnonzero(np.concatenate(([True], sc[1:] != sc[:-1])))
        return CorrelationIndex(sc[first].astype(np.int64), order[first].astype(np.int64))

    def lookup(self, corr: I64) -> I64:
        """The row carrying each correlation in ``corr``, or -1 (none, or a negative id)."""
        corr = np.asarray(corr, dtype=np.int64)
        if self.keys.size == 0:
            return np.full(corr.size, -1, dtype=np.int64)
        pos = np.searchsorted(self.keys, corr)
        pos_c = np.minimum(pos, self.keys.size - 1)
        hit = (corr >= 0) & (pos < self.keys.size) & (self.keys[pos_c] == corr)
        return np.where(hit, self.rows[pos_c], -1).astype(np.int64)


@dataclass(frozen=True)
class GpuRecords:
    """Every GPU record of the graph: kernels, then memcpy, then memset rows. Null devices
    read as 0, null correlations as -1."""

    start: I64
    end: I64
    device: I64
    correlation: I64
    key: I64  # :func:`correlation_keys`
    n_kernels: int
    n_memcpy: int

    @property
    def size(self) -> int:
        return int(self.start.size)


@dataclass(frozen=True)
class GpuByCorrelation:
    """The GPU records grouped by correlation: sorted distinct keys (:func:`correlation_keys`),
    the first start, the summed duration and the last end of the records of each."""

    keys: I64
    first_start: I64
    total_ns: I64
    last_end: I64

    def lookup(self, corr: I64) -> I64:
        """Position of each correlation in :attr:`keys`, or -1."""
        if self.keys.size == 0:
            return np.full(np.asarray(corr).size, -1, dtype=np.int64)
        pos = np.searchsorted(self.keys, corr)
        pos_c = np.minimum(pos, self.keys.size - 1)
        return np.where((pos < self.keys.size) & (self.keys[pos_c] == corr), pos_c,
                        -1).astype(np.int64)


@dataclass(frozen=True)
class StepGraph:
    """One rank's events (``rank=None``: all ranks') and their links (module docstring)."""

    rank: int | None
    manifest: Manifest
    _read: Callable[[str], pa.Table] = field(compare=False, repr=False)
    _memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)
    # what every rank's graph of one run shares (RunGraph's): results that depend on names
    # only, not on a rank's events (the classification of kernel names)
    _shared: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- the tables ------------------------------------------------------------------------

    def table(self, name: str) -> pa.Table:
        """The rank's table ``name`` (empty, with its schema, when the run has none)."""
        return self._read(name)

    def has(self, name: str) -> bool:
        """Whether the run (any rank) has rows of table ``name``."""
        return self.manifest.tables.get(name, 0) > 0

    @property
    def rank_id(self) -> int:
        """The rank of a one-rank graph (0 for a whole-run graph)."""
        return self.rank if self.rank is not None else 0

    @property
    def source_kind(self) -> str:
        return self.manifest.source.kind

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest.settings or {}

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per graph and key: results several consumers need."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])

    def shared(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per run and key, shared by every rank's graph: only for values
        that do not depend on the rank's events (a cache keyed by kernel name)."""
        if key not in self._shared:
            self._shared[key] = compute()
        return cast(T, self._shared[key])

    # -- API call <-> GPU records ----------------------------------------------------------

    @cached_property
    def gpu(self) -> GpuRecords:
        parts = [self.table(n) for n in GPU_TABLES]
        s = [_i64(t, "ts_ns", 0) for t in parts]
        d = [_i64(t, "dur_ns", 0) for t in parts]
        return GpuRecords(
            start=np.concatenate(s), end=np.concatenate([a + b for a, b in zip(s, d)]),
            device=np.concatenate([_i64(t, "device", 0) for t in parts]),
            correlation=np.concatenate([_i64(t, "correlation", -1) for t in parts]),
            key=np.concatenate([correlation_keys(t) for t in parts]),
            n_kernels=parts[0].num_rows, n_memcpy=parts[1].num_rows)

    @cached_property
    def _api_index(self) -> CorrelationIndex:
        return CorrelationIndex.of(self.keys("api_calls"))

    @cached_property
    def _memcpy_index(self) -> CorrelationIndex:
        return CorrelationIndex.of(self.keys("memcpy"))

    def keys(self, name: str) -> I64:
        """The correlation key of each row of table ``name`` (:func:`correlation_keys`)."""
        return self.memo(("correlation_keys", name), lambda: correlation_keys(self.table(name)))

    def api_row(self, keys: I64) -> I64:
        """The ``api_calls`` row that issued the GPU work of each correlation key, or -1."""
        return self._api_index.lookup(keys)

    def memcpy_row(self, keys: I64) -> I64:
        """The ``memcpy`` row of each (API call's) correlation key, or -1."""
        return self._memcpy_index.lookup(keys)

    @cached_property
    def gpu_api_row(self) -> I64:
        """For each GPU record (:attr:`gpu`), the row of the API call that issued it, or -1."""
        return self.api_row(self.gpu.key)

    @cached_property
    def gpu_by_correlation(self) -> GpuByCorrelation:
        g = self.gpu
        keep = g.key >= 0
        s, e, c = g.start[keep], g.end[keep], g.key[keep]
        if c.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return GpuByCorrelation(z, z.copy(), z.copy(), z.copy())
        order = np.argsort(c, kind="stable")
        c, s, e = c[order], s[order], e[order]
        uniq, first = np.unique(c, return_index=True)
        return GpuByCorrelation(uniq, np.minimum.reduceat(s, first),
                                np.add.reduceat(e - s, first), np.maximum.reduceat(e, first))

    @cached_property
    def issued_ns(self) -> I64:
        """When each GPU record (:attr:`gpu`) was issued: its launching API call's start, else
        its own start. Assigning GPU work to the step that issued it keeps it in that step
        even when the host runs ahead of the GPU."""
        row = self.gpu_api_row
        a_s = _i64(self.table("api_calls"), "ts_ns", 0)
        return np.where(row >= 0, a_s[np.maximum(row, 0)] if a_s.size else 0,
                        self.gpu.start).astype(np.int64)

    # -- op <-> API call -------------------------------------------------------------------

    def enclosing_op(self, kind: str, api_rows: I64, *, innermost: bool = True) -> I64:
        """The ``cpu_ops`` row of ``kind`` enclosing each API call of ``api_rows`` on the same
        ``(pid, tid)`` (innermost, or outermost), or -1."""
        import stepscope.analysis.intervals as iv

        ops = self.table("cpu_ops")
        api = self.table("api_calls")
        kinds = ops.column("kind").cast(pa.string()) if ops.num_rows else None
        m = (np.asarray(pc.fill_null(pc.equal(kinds, kind), False).to_numpy(
            zero_copy_only=False), dtype=bool) if kinds is not None
            else np.zeros(0, dtype=bool))
        rows = np.flatnonzero(m)
        o_s = _i64(ops, "ts_ns", 0)[m]
        o_e = o_s + _i64(ops, "dur_ns", 0)[m]
        a_s = _i64(api, "ts_ns", 0)[api_rows]
        a_e = a_s + _i64(api, "dur_ns", 0)[api_rows]
        og, ag = iv.group_ids((_i64(ops, "pid", -1)[m], _i64(ops, "tid", -1)[m]),
                              (_i64(api, "pid", -1)[api_rows], _i64(api, "tid", -1)[api_rows]))
        idx = iv.containing_by_group(og, o_s, o_e, ag, a_s, a_e, innermost=innermost)
        return np.where(idx >= 0, rows[np.maximum(idx, 0)] if rows.size else -1, -1)


@dataclass(frozen=True)
class RunGraph:
    """The step graphs of every rank of a run, and of the run as a whole."""

    manifest: Manifest
    ranks: tuple[int, ...]
    _read: Callable[[str, int | None], pa.Table] = field(compare=False, repr=False)
    _graphs: dict[int | None, StepGraph] = field(default_factory=dict, compare=False,
                                                 repr=False)
    _shared: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def rank(self, rank: int | None) -> StepGraph:
        """Rank ``rank``'s graph (``None``: every rank's events together), built once."""
        if rank not in self._graphs:
            read = self._read
            self._graphs[rank] = StepGraph(rank=rank, manifest=self.manifest,
                                           _read=lambda name: read(name, rank),
                                           _shared=self._shared)
        return self._graphs[rank]

    @property
    def all(self) -> StepGraph:
        return self.rank(None)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks the run's program used (``store.frameworks.run_frameworks``)."""
        return run_frameworks(self.manifest)

    def has(self, name: str) -> bool:
        return self.manifest.tables.get(name, 0) > 0


def run_graph(run: Run) -> RunGraph:
    """The step graph of ``run``, built once per ``Run`` object."""
    return run.derived(("step_graph",), lambda: _build(run))


def rank_graph(run: Run, rank: int | None) -> StepGraph:
    """Rank ``rank``'s step graph of ``run`` (``None``: all ranks)."""
    return run_graph(run).rank(rank)


def _build(run: Run) -> RunGraph:
    return RunGraph(manifest=run.manifest, ranks=run.ranks, _read=run.table)


__all__ = ["CorrelationIndex", "correlation_keys", "GpuByCorrelation", "GpuRecords", "RunGraph", "StepGraph",
           "rank_graph", "run_graph"]
