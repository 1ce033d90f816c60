"""DataLoader bookkeeping without torch: settings read once per loader, batches, worker pids."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from stepscope.capture.loader_records import LoaderRecords


class Loader:
    num_workers = 2
    pin_memory = True
    batch_size = 16
    dataset = [1, 2, 3]


class Iterator:
    _pin_memory = False

    def __init__(self, pids: tuple[int | None, ...]) -> None:
        self._workers = [SimpleNamespace(pid=p) for p in pids]


def test_settings_batches_and_workers() -> None:
    rows: list[tuple[str, tuple[Any, ...]]] = []
    procs: list[tuple[int, str]] = []
    diags: list[str] = []
    rec = LoaderRecords(push=lambda t, r: rows.append((t, r)), note_thread=lambda: 77,
                        note_process=lambda pid, name: procs.append((pid, name)),
                        diag=lambda code, msg: diags.append(code))
    loader = Loader()
    it1, it2 = Iterator((101, 102)), Iterator((103, None))
    rec.on_iterator(loader, it1)
    rec.on_iterator(loader, it2)
    for t in range(3):
        rec.on_wait(it1, 10 * t, 10 * t + 4)
    rec.on_wait(Iterator(()), 5, 3)  # an iterator never seen: a wait all the same, clamped at 0
    (s,) = rec.settings()
    assert s["iterators"] == 2 and s["batches"] == 3
    assert s["num_workers"] == 2 and s["pin_memory"] is True and s["pin_memory_effective"] is False
    assert s["dataset"] == "list" and s["loader_class"] == "Loader"
    assert rec.worker_pids() == frozenset({101, 102, 103})
    assert procs == [(101, "DataLoader worker 0"), (102, "DataLoader worker 1"),
                     (103, "DataLoader worker 0")]
    assert [r[1][1] for r in rows] == [4, 4, 4, 0] and {r[1][3] for r in rows} == {77}
    assert {t for t, _ in rows} == {"input_waits"} and not diags


def test_a_failing_record_is_a_diagnostic_not_an_exception() -> None:
    diags: list[str] = []

    def broken_push(table: str, row: tuple[Any, ...]) -> None:
        raise RuntimeError("full")

    rec = LoaderRecords(push=broken_push, note_thread=lambda: 1,
                        note_process=lambda pid, name: None, diag=lambda c, m: diags.append(c))
    rec.on_wait(Iterator(()), 0, 1)
    assert diags == ["input_wait_hook_error"]
