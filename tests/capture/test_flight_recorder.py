"""The capture's use of torch.distributed's flight recorder: sizing the buffer without a
deprecation warning, reading both recorders, and every way that can fail (a diagnostic, never
an exception in the program). Fake ``torch`` modules here; the real torch (CPU, gloo) in
``test_real_torch_*`` and in ``test_torchrun.py``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stepscope.capture.flight_recorder import (
    BUFFER_ENTRIES,
    FlightRecorderTap,
    buffer_vars,
    read_dumps,
    torch_version,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
T0 = 1_795_000_000_000_000_000


def _entry(rid: int, t: int, name: str = "nccl:all_reduce", seq: int = 1) -> dict[str, Any]:
    return {"record_id": rid, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": rid, "profiling_name": name,
            "time_created_ns": t, "input_sizes": [[256]], "input_dtypes": ["Float"],
            "output_sizes": [[256]], "output_dtypes": ["Float"], "state": "completed",
            "is_p2p": False}


class FakeC10d:
    """``torch._C._distributed_c10d`` with the dump functions asked for."""

    def __init__(self, **fns: Any) -> None:
        for name, fn in fns.items():
            setattr(self, name, fn)


def pickled(entries: list[dict[str, Any]], ranks: str = "[0, 1]") -> Any:
    data = {"version": "2.10", "entries": entries,
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}}

    def dump(includeCollectives: bool = True, includeStackTraces: bool = True,
             onlyActive: bool = False) -> bytes:
        assert includeStackTraces is False  # the frames cost most of a dump
        return pickle.dumps(data)

    return dump


class FakeDist:
    def __init__(self, initialized: bool = True) -> None:
        self.initialized = initialized

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized


def modules(c10d: Any, version: str = "2.11.0+cu130", initialized: bool = True,
            cuda_device: int | None = None) -> dict[str, Any]:
    class C:
        _distributed_c10d = c10d

    class Torch:
        __version__ = version
        _C = C

    mods: dict[str, Any] = {"torch": Torch, "torch.distributed": FakeDist(initialized)}
    if cuda_device is not None:
        class Cuda:
            @staticmethod
            def is_initialized() -> bool:
                return True

            @staticmethod
            def current_device() -> int:
                return cuda_device

        mods["torch.cuda"] = Cuda
    return mods


def tap(mods: dict[str, Any], env: dict[str, str] | None = None) -> FlightRecorderTap:
    return FlightRecorderTap(True, {} if env is None else env, modules=mods)


# -- sizing the buffer ---------------------------------------------------------------------

def test_versions_and_the_variable_each_reads() -> None:
    assert torch_version("2.11.0+cu130") == (2, 11) and torch_version("2.8.0a0+gitabc") == (2, 8)
    assert torch_version("") is None and torch_version("nightly") is None
    assert buffer_vars((2, 4)) == ("TORCH_NCCL_TRACE_BUFFER_SIZE",)
    assert buffer_vars((2, 7)) == ("TORCH_NCCL_TRACE_BUFFER_SIZE",)
    # from 2.8 the old name is deprecated (torch warns when it sees it): never set it there
    for v in ((2, 8), (2, 11), (3, 0), None):
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in buffer_vars(v)
        assert "TORCH_FR_BUFFER_SIZE" in buffer_vars(v)


@pytest.mark.parametrize("version,expected", [
    ("2.5.1+cu124", {"TORCH_NCCL_TRACE_BUFFER_SIZE": str(BUFFER_ENTRIES)}),
    ("2.11.0+cu130", {"TORCH_FR_BUFFER_SIZE": str(BUFFER_ENTRIES),
                      "TORCH_TRACE_BUFFER_SIZE": str(BUFFER_ENTRIES)}),
])
def test_arming_sets_the_buffer_of_that_torch(version: str, expected: dict[str, str]) -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    t = tap(modules(FakeC10d(), version), env)
    t.arm()
    assert env == {"PATH": "/bin", **expected}
    assert t.status["state"] == "armed" and t.status["torch"] == version


@pytest.mark.parametrize("var", ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
                                 "TORCH_TRACE_BUFFER_SIZE"])
def test_a_size_set_before_is_left_alone(var: str) -> None:
    env = {var: "0"}  # the user turned it off (or a parent process sized it)
    t = tap(modules(FakeC10d()), env)
    t.arm()
    assert env == {var: "0"} and t.status == {"state": "preset", "buffer": f"{var}=0",
                                              "torch": "2.11.0+cu130"}


def test_switched_off_it_neither_sizes_nor_reads() -> None:
    env: dict[str, str] = {}
    c10d = FakeC10d(_dump_nccl_trace=pickled([_entry(0, T0 + 5)]))
    t = FlightRecorderTap(False, env, modules=modules(c10d))
    t.arm()
    assert env == {} and t.take(0, T0, T0 + 10) == ({}, []) and t.status == {"state": "off"}


# -- reading it --------------------------------------------------------------------------------

def test_take_keeps_the_window_and_names_the_device() -> None:
    entries = [_entry(3, T0 - 5, seq=4), _entry(4, T0 + 5, seq=5), _entry(5, T0 + 20, seq=6)]
    t = tap(modules(FakeC10d(_dump_nccl_trace=pickled(entries)), cuda_device=3))
    tables, diags = t.take(1, T0, T0 + 10)
    c = tables["collectives"]
    assert c["seq"] == [5] and c["device"] == [3] and c["rank"] == [1]
    assert c["pg_ranks"] == [[0, 1]] and c["bytes"] == [1024]
    assert diags == []
    assert t.status["rows"] == 1 and t.status["before_window"] == 1
    assert t.status["after_window"] == 1 and t.status["recorders"] == {"nccl": 3}


def test_both_recorders_are_read_and_json_serves_where_pickle_is_missing() -> None:
    gloo = {"version": "2.10", "entries": [_entry(0, T0 + 2, "gloo:all_gather", seq=1)],
            "pg_config": {}}

    def as_json(includeCollectives: bool = True, onlyActive: bool = False) -> bytes:
        return json.dumps(gloo).encode()

    c10d = FakeC10d(_dump_nccl_trace=pickled([_entry(7, T0 + 1)]), _dump_fr_trace_json=as_json)
    dump = read_dumps(c10d)
    assert dump.recorders == {"nccl": 1, "generic": 1} and dump.apis == 2 and not dump.errors
    tables, _ = tap(modules(c10d)).take(0, T0, T0 + 10)
    assert tables["collectives"]["name"] == ["nccl:all_reduce", "gloo:all_gather"]


def test_an_old_signature_is_called_without_arguments() -> None:
    data = {"entries": [_entry(0, T0 + 1)]}

    def old() -> bytes:  # torch before the keyword arguments
        return pickle.dumps(data)

    assert len(read_dumps(FakeC10d(_dump_nccl_trace=old)).entries) == 1


def test_no_dump_api_is_a_diagnostic_only_when_distributed_is_in_use() -> None:
    tables, diags = tap(modules(FakeC10d(), "2.1.0")).take(0, T0, T0 + 10)
    assert tables == {} and [d.code for d in diags] == ["flight_recorder_unavailable"]
    assert "2.1.0" in diags[0].message
    assert tap(modules(FakeC10d(), initialized=False)).take(0, T0, T0 + 10) == ({}, [])


def test_no_torch_distributed_means_nothing_at_all() -> None:
    mods = modules(FakeC10d(_dump_nccl_trace=pickled([_entry(0, T0 + 1)])))
    del mods["torch.distributed"]
    assert tap(mods).take(0, T0, T0 + 10) == ({}, [])  # not even a dump


def test_a_dump_that_raises_is_a_warning_and_the_other_recorder_still_counts() -> None:
    def boom(**_: Any) -> bytes:
        raise RuntimeError("watchdog gone")

    c10d = FakeC10d(_dump_nccl_trace=boom, _dump_fr_trace=pickled([_entry(0, T0 + 1, "gloo:all_reduce")]))
    tables, diags = tap(modules(c10d)).take(0, T0, T0 + 10)
    assert tables["collectives"]["name"] == ["gloo:all_reduce"]
    assert [d.code for d in diags] == ["flight_recorder_failed"] and "watchdog gone" in diags[0].message
    garbage = FakeC10d(_dump_nccl_trace=lambda **_: b"not a pickle")
    tables, diags = tap(modules(garbage)).take(0, T0, T0 + 10)
    assert tables == {} and [d.code for d in diags] == ["flight_recorder_failed"]


def test_an_empty_buffer_says_why_there_are_no_sizes() -> None:
    t = tap(modules(FakeC10d(_dump_nccl_trace=pickled([]))), {"TORCH_FR_BUFFER_SIZE": "0"})
    t.arm()
    tables, diags = t.take(0, T0, T0 + 10)
    assert tables == {} and [d.code for d in diags] == ["flight_recorder_empty"]
    assert "TORCH_FR_BUFFER_SIZE=0" in diags[0].message


def test_a_ring_that_overwrote_the_window_start_is_a_warning() -> None:
    # the oldest entry kept is record 900 (900 were overwritten) and it is inside the window
    entries = [_entry(900 + k, T0 + 10 + k, seq=901 + k) for k in range(3)]
    tables, diags = tap(modules(FakeC10d(_dump_nccl_trace=pickled(entries)))).take(0, T0, T0 + 99)
    assert len(tables["collectives"]["seq"]) == 3
    assert [d.code for d in diags] == ["flight_recorder_overflow"]
    # the same ring, but its oldest entry is older than the window: nothing in it was lost
    entries.insert(0, _entry(899, T0 - 1, seq=900))
    _, diags = tap(modules(FakeC10d(_dump_nccl_trace=pickled(entries)))).take(0, T0, T0 + 99)
    assert diags == []


def test_group_ranks_come_from_torch_when_the_dump_has_none() -> None:
    from stepscope.capture.flight_recorder import group_ranks

    class World:
        pg_names = {"pgA": "0", "pgB": "7"}
        pg_group_ranks = {"pgA": {0: 0, 1: 1}, "pgB": {3: 1, 1: 0}}  # global -> group rank

    class C10dPy:
        _world = World

    class Dist(FakeDist):
        distributed_c10d = C10dPy

    assert group_ranks(Dist()) == {"0": [0, 1], "7": [1, 3]}  # in group-rank order
    mods = modules(FakeC10d(_dump_fr_trace=pickled([_entry(0, T0 + 1, "gloo:x")], ranks="[]")))
    mods["torch.distributed"] = Dist()
    t = tap(mods)
    t.note_groups()
    World.pg_names = {}  # destroyed before the window closed: the ranks noted at its start
    tables, _ = t.take(0, T0, T0 + 10)
    assert tables["collectives"]["pg_ranks"] == [[0, 1]]


# -- the real torch (CPU build, gloo) ------------------------------------------------------------

REAL = """
import os, sys, time
sys.path.insert(0, os.environ["SRC_DIR"])
from stepscope.capture.flight_recorder import FlightRecorderTap
tap = FlightRecorderTap(True, os.environ)
tap.arm()                        # before import torch: waits for it
assert "torch" not in sys.modules
import torch, torch.distributed as dist   # the post-import hook sizes the buffer here
print("status", tap.status["state"], tap.status["buffer"])
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(1000, dtype=torch.bfloat16)
dist.all_reduce(t)
lo = time.time_ns()
tap.note_groups()                # as the capture does when its window opens
for _ in range(3):
    dist.all_reduce(t)
dist.broadcast(torch.ones(4, 5), 0)
hi = time.time_ns()
dist.destroy_process_group()     # the window may close after the groups are gone
tables, diags = tap.take(0, lo, hi)
c = tables.get("collectives", {"op": [], "bytes": [], "seq": [], "pg_ranks": [None]})
print("ops", c["op"], "bytes", c["bytes"], "seq", c["seq"], "pg", c["pg_ranks"][0])
print("diags", [d.code for d in diags], "hooks", sum(type(f).__name__ == "PostImportFinder" for f in sys.meta_path))
"""


def _real(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("torch.distributed")
    script = tmp_path / "real.py"
    script.write_text(REAL)
    clean = {k: v for k, v in os.environ.items() if "BUFFER_SIZE" not in k}
    return subprocess.run([sys.executable, str(script)], env={**clean, "SRC_DIR": SRC, **env}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_real_torch_buffer_sized_after_import_and_read_in_the_window(tmp_path: Path) -> None:
    r = _real(tmp_path, {})
    assert r.returncode == 0, r.stderr
    assert "deprecated" not in r.stderr  # the variable this torch reads, not the old name
    out = r.stdout.splitlines()
    import torch

    old = torch_version(torch.__version__) < (2, 8)  # type: ignore[operator]
    assert out[0] == ("status armed " + ("TORCH_NCCL_TRACE_BUFFER_SIZE" if old
                                         else "TORCH_FR_BUFFER_SIZE") + f"={BUFFER_ENTRIES}")
    # the three all-reduces of 1000 bf16 and the broadcast of 20 floats issued in the window;
    # sequence numbers count the one before it; the world group's ranks were noted before
    # destroy_process_group
    assert out[1] == ("ops ['all_reduce', 'all_reduce', 'all_reduce', 'broadcast'] "
                      "bytes [2000, 2000, 2000, 80] seq [2, 3, 4, 5] pg [0]")
    assert out[2] == "diags [] hooks 0"  # the import watcher took itself out


def test_real_torch_buffer_switched_off_by_the_user(tmp_path: Path) -> None:
    r = _real(tmp_path, {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"})
    # (torch >= 2.8 warns about the old name the user set: not ours to hide); the buffer is off
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "status preset TORCH_FR_BUFFER_SIZE=0"
    assert out[1] == "ops [] bytes [] seq [] pg None"
    assert out[2] == "diags ['flight_recorder_empty'] hooks 0"
