"""The export's string table (``StringIds``: id -> text): kernel, API call, thread and NVTX
names are ids into it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.importers.nsys.source import Export


class Strings:
    """``StringIds`` held as a sorted id array and the matching texts (one copy of each)."""

    def __init__(self, export: Export, table: str = "StringIds") -> None:
        ids: list[np.ndarray] = []
        texts: list[pa.Array] = []
        for t in export.scan(table, {"id": pa.int64(), "value": pa.string()}):
            t = t.filter(pc.is_valid(t.column("id")))
            ids.append(t.column("id").to_numpy())
            texts.append(t.column("value").combine_chunks())
        all_ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
        order = np.argsort(all_ids, kind="stable")
        self._ids = all_ids[order]
        joined = pa.concat_arrays(texts) if texts else pa.array([], pa.string())
        self._texts = joined.take(pa.array(order))

    def __len__(self) -> int:
        return int(self._ids.size)

    def take(self, ids: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The texts of ``ids`` (null where the id is null or not in the table)."""
        arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        if not len(arr) or not self._ids.size:
            return pa.nulls(len(arr), pa.string())
        q = arr.cast(pa.int64()).fill_null(-1).to_numpy()
        pos = np.searchsorted(self._ids, q)
        ok = pos < self._ids.size
        pos = np.where(ok, pos, 0)
        ok &= self._ids[pos] == q
        ok &= np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
        idx = pa.array(pos, mask=~ok)
        return self._texts.take(idx)

    def names(self, ids: pa.Array | pa.ChunkedArray, missing: str) -> pa.DictionaryArray:
        """The texts of ``ids`` dictionary-encoded (each distinct id looked up once; ``missing``
        for a null or unknown id): kernel and call names repeat, and are long."""
        arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        enc = pc.fill_null(arr.cast(pa.int64()), -1).dictionary_encode()
        texts = pc.fill_null(self.take(enc.dictionary), missing)
        return pa.DictionaryArray.from_arrays(enc.indices, texts)

    def get(self, sid: int | None) -> str | None:
        if sid is None:
            return None
        out = self.take(pa.array([sid], pa.int64()))[0].as_py()
        return out if isinstance(out, str) else None


__all__ = ["Strings"]
