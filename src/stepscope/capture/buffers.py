"""Bounded per-table buffers of row tuples between two drains of the host capture.

Each table keeps at most ``cap`` rows; beyond it the oldest are dropped and counted, and the
count becomes a ``host_buffer_full`` diagnostic. ``drain()`` hands the rows out as column dicts
(the ``schema`` columns of each table, ``rank`` first) and starts empty buffers. Thread-safe;
re-entrant, since a drain may run in a signal handler while the same thread was pushing.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from stepscope.schema import spec
from stepscope.store.manifest import Diagnostic


class _Buffer:
    def __init__(self, cap: int) -> None:
        self.rows: deque[tuple[Any, ...]] = deque(maxlen=max(1, cap))
        self.dropped = 0


class TableBuffers:
    """One bounded buffer per table of ``tables``; rows are tuples of the columns after ``rank``."""

    def __init__(self, tables: Sequence[str], cap: int) -> None:
        self._lock = threading.RLock()
        self._buffers = {t: _Buffer(cap) for t in tables}

    def after_fork(self) -> None:
        """In a forked child: the lock may have been held by a thread of the parent."""
        self._lock = threading.RLock()

    def push(self, table: str, row: tuple[Any, ...]) -> None:
        with self._lock:
            buf = self._buffers[table]
            if len(buf.rows) == buf.rows.maxlen:
                buf.dropped += 1
            buf.rows.append(row)

    def push_many(self, table: str, rows: list[Any]) -> None:
        with self._lock:
            buf = self._buffers[table]
            assert buf.rows.maxlen is not None
            over = len(buf.rows) + len(rows) - buf.rows.maxlen
            if over > 0:
                buf.dropped += min(over, len(buf.rows) + len(rows))
            buf.rows.extend(rows)

    def drain(self, rank: int) -> dict[str, dict[str, list[Any]]]:
        with self._lock:
            taken = {}
            for table, buf in self._buffers.items():
                taken[table], buf.rows = buf.rows, deque(maxlen=buf.rows.maxlen)
        out: dict[str, dict[str, list[Any]]] = {}
        for table, rows in taken.items():
            names = spec(table).column_names
            cols: dict[str, list[Any]] = {n: [] for n in names}
            cols["rank"] = [rank] * len(rows)
            for name, values in zip(names[1:], zip(*rows) if rows else [()] * (len(names) - 1)):
                cols[name] = list(values)
            out[table] = cols
        return out

    def diagnostics(self) -> list[Diagnostic]:
        """A ``host_buffer_full`` warning for each table that dropped rows."""
        with self._lock:
            return [Diagnostic(
                level="warning", code="host_buffer_full",
                message=f"{table}: more than {buf.rows.maxlen} rows between drains; the oldest "
                        f"{buf.dropped} were dropped (drain more often or raise "
                        "HostSettings.max_rows)", count=buf.dropped)
                for table, buf in self._buffers.items() if buf.dropped]
