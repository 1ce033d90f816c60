"""What the DataLoader hooks saw: input waits, each loader's settings, its worker processes.

``on_wait`` and ``on_iterator`` are the callbacks of ``hooks.dataloader``: they run on the
user's thread inside ``__next__``/``iter()`` and never raise (a failure is a diagnostic).
Loaders and iterators are held weakly; ``settings()`` lists every loader seen, with the
iterators it made and the batches fetched through them.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from stepscope.schema_enums import InputWaitSource


class LoaderRecords:
    """``push(table, row)``, ``note_thread()`` (the native id of the current thread, noted as a
    sampled thread), ``note_process(pid, name)`` and ``diag(code, message)`` are the host
    capture's."""

    def __init__(self, *, push: Callable[[str, tuple[Any, ...]], None],
                 note_thread: Callable[[], int], note_process: Callable[[int, str], None],
                 diag: Callable[[str, str], None]) -> None:
        self._push = push
        self._note_thread = note_thread
        self._note_process = note_process
        self._diag = diag
        self._lock = threading.Lock()
        self._loaders: list[dict[str, Any]] = []
        self._loader_records: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._iter_records: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._iter_workers: weakref.WeakKeyDictionary[Any, tuple[int, ...]] = weakref.WeakKeyDictionary()

    def after_fork(self) -> None:
        """In a forked child (a DataLoader worker): the lock may have been held at fork time."""
        self._lock = threading.Lock()

    def on_wait(self, it: Any, t0: int, t1: int) -> None:
        try:
            tid = self._note_thread()
            self._push("input_waits", (t0, max(0, t1 - t0), os.getpid(), tid,
                                       InputWaitSource.DATALOADER.value, "DataLoader.__next__"))
            record = self._iter_records.get(it)
            if record is not None:
                record["batches"] += 1
        except Exception as e:  # never raise out of the user's __next__
            self._diag("input_wait_hook_error", f"DataLoader wait not recorded: {e!r}")

    def on_iterator(self, loader: Any, it: Any) -> None:
        try:
            record = self._loader_records.get(loader)
            if record is None:
                record = loader_settings(loader, it)
                self._loader_records[loader] = record
                with self._lock:
                    self._loaders.append(record)
            record["iterators"] += 1
            self._iter_records[it] = record
            pids = tuple(int(w.pid) for w in getattr(it, "_workers", ()) if w.pid is not None)
            if pids:
                self._iter_workers[it] = pids
                for i, pid in enumerate(pids):
                    self._note_process(pid, f"DataLoader worker {i}")
        except Exception as e:
            self._diag("dataloader_settings_error", f"could not read DataLoader settings: {e}")

    def worker_pids(self) -> frozenset[int]:
        """The worker processes of the live iterators."""
        return frozenset(p for pids in list(self._iter_workers.values()) for p in pids)

    def settings(self) -> list[dict[str, Any]]:
        """A copy of every loader's record, in the order they were first iterated."""
        with self._lock:
            return [dict(r) for r in self._loaders]


def loader_settings(loader: Any, it: Any) -> dict[str, Any]:
    """The settings of ``loader`` (and of its iterator ``it``) as JSON values; counts at zero."""

    def get(obj: Any, name: str) -> Any:
        v = getattr(obj, name, None)
        return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)

    return {
        "num_workers": get(loader, "num_workers"),
        "pin_memory": get(loader, "pin_memory"),
        "pin_memory_effective": get(it, "_pin_memory"),
        "prefetch_factor": get(loader, "prefetch_factor"),
        "persistent_workers": get(loader, "persistent_workers"),
        "batch_size": get(loader, "batch_size"),
        "drop_last": get(loader, "drop_last"),
        "dataset": type(getattr(loader, "dataset", None)).__name__,
        "loader_class": type(loader).__name__,
        "iterators": 0,
        "batches": 0,
    }
