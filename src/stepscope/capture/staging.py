"""A captured process's staging partition, as the process writes it.

Every captured process writes into its own folder under the staging directory the launcher made
(``STAGING/p<start_ns>-<pid>/``): a ``meta.json`` (who it was, how it ended, settings, overhead,
diagnostics, ``PartitionMeta``) and Parquet chunks ``<table>.<n>.parquet`` conformed to
``schema.TABLES`` (``StagingPartition``), plus what a GPU backend kept raw for the merge to decode
(``capture.materialize``). Chunks and meta are written to a temporary name and renamed, so a
process killed mid-write leaves the previous chunks readable. Reading the partitions back and
merging them into a run: ``capture.partitions``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.store.manifest import Diagnostic
from stepscope.store.writer import conform

META_NAME = "meta.json"


@dataclass(frozen=True)
class PartitionMeta:
    pid: int
    start_ns: int
    ppid: int = 0
    host: str = ""
    env_rank: int | None = None
    world_size: int | None = None
    argv: tuple[str, ...] = ()
    ended: str = "running"  # "exit" | "exception: <Type>" | "signal: <NAME>" | "running"
    settings: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, Any] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()

    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["argv"] = list(self.argv)
        d["diagnostics"] = [vars(x) for x in self.diagnostics]
        return json.dumps(d, default=str)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PartitionMeta:
        return PartitionMeta(
            pid=int(d["pid"]), start_ns=int(d["start_ns"]), ppid=int(d.get("ppid", 0)),
            host=str(d.get("host", "")),
            env_rank=None if d.get("env_rank") is None else int(d["env_rank"]),
            world_size=None if d.get("world_size") is None else int(d["world_size"]),
            argv=tuple(str(a) for a in d.get("argv", ())), ended=str(d.get("ended", "running")),
            settings=dict(d.get("settings", {})), overhead=dict(d.get("overhead", {})),
            diagnostics=tuple(Diagnostic(**x) for x in d.get("diagnostics", ())),
        )


def env_rank(environ: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(rank, world size) from the launcher's environment variables, if any."""

    def num(*keys: str) -> int | None:
        for k in keys:
            v = environ.get(k, "").strip()
            if v.isdigit():
                return int(v)
        return None

    return num("RANK", "LOCAL_RANK"), num("WORLD_SIZE", "LOCAL_WORLD_SIZE")


class StagingPartition:
    """One process's staging folder. Not thread-safe: the bootstrap serialises calls.
    ``prefix`` keeps the chunk names of another writer apart (``gpu``: the decoded raw records)."""

    def __init__(self, path: Path, prefix: str = "") -> None:
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self._prefix = prefix
        self._chunks = 0

    @staticmethod
    def for_process(staging: Path, pid: int, start_ns: int) -> StagingPartition:
        return StagingPartition(staging / f"p{start_ns}-{pid}")

    def write_chunk(self, tables: Mapping[str, Mapping[str, Sequence[Any]] | pa.Table]) -> int:
        """Write one chunk of every non-empty table; returns the rows written."""
        n = self._chunks
        self._chunks += 1
        rows = 0
        for name, data in tables.items():
            t = conform(name, data)
            if t.num_rows == 0:
                continue
            dest = self.path / f"{name}.{self._prefix}{n:05d}.parquet"
            tmp = dest.with_suffix(".tmp")
            pq.write_table(t, tmp, compression="zstd")
            os.replace(tmp, dest)
            rows += t.num_rows
        return rows

    def write_meta(self, meta: PartitionMeta) -> None:
        tmp = self.path / (META_NAME + ".tmp")
        tmp.write_text(meta.to_json(), encoding="utf-8")
        os.replace(tmp, self.path / META_NAME)


__all__ = ["META_NAME", "PartitionMeta", "StagingPartition", "env_rank"]
