"""A session's writes into its staging partition, under the row cap.

Rows written as Parquet chunks and records the GPU backend keeps raw (decoded at merge,
``capture.cupti.spill``) both count toward ``max_rows``: past it, nothing more is written and the
session closes its window (``row_cap`` diagnostic). Not thread-safe: the session lets one flush
write at a time.
"""

from __future__ import annotations

from stepscope.capture.chunks import Tables, count_rows
from stepscope.capture.partitions import StagingPartition
from stepscope.store.manifest import Diagnostic


class WindowWriter:
    def __init__(self, partition: StagingPartition, max_rows: int) -> None:
        self.partition = partition
        self.max_rows = max_rows
        self.rows = 0
        self._raw_counted = 0  # GPU records kept raw, counted into ``rows``
        self.diagnostics: list[Diagnostic] = []

    def write(self, data: Tables) -> bool:
        """Write one chunk; False (nothing written) when it would pass the row cap."""
        n = count_rows(data)
        if not n:
            return True
        if self.rows + n > self.max_rows:
            self._cap_reached()
            return False
        try:
            self.rows += self.partition.write_chunk(data)
        except Exception as exc:
            self.diagnostics.append(Diagnostic("error", "flush_failed",
                                               f"writing the partition failed: {exc!r}"))
        return True

    def count_raw(self, total: int) -> bool:
        """Count the backend's raw records (``total`` so far); False when over the cap."""
        self.rows += total - self._raw_counted
        self._raw_counted = total
        if self.rows <= self.max_rows:
            return True
        self._cap_reached()
        return False

    def _cap_reached(self) -> None:
        if not any(d.code == "row_cap" for d in self.diagnostics):
            self.diagnostics.append(Diagnostic(
                "warning", "row_cap",
                f"stopped capturing after {self.rows} rows (cap {self.max_rows}): "
                "use a shorter window (--steps A-B)"))


__all__ = ["WindowWriter"]
