"""The metric samplers' own process: rows, worker following, stopping, failures, forks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections import Counter
from typing import Any

import pytest

from stepscope.capture.samplers import Row
from stepscope.capture.samplers import remote as remote_mod
from stepscope.capture.samplers.remote import SamplerProcess

psutil = pytest.importorskip("psutil")


class Sink:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.diags: list[tuple[str, str, str]] = []

    def push(self, rows: list[Row]) -> None:
        self.rows.extend(rows)

    def diag(self, level: str, code: str, message: str) -> None:
        self.diags.append((level, code, message))

    def metrics(self) -> Counter[str]:
        return Counter(r[2] for r in self.rows)


def make(sink: Sink, **kw: Any) -> SamplerProcess:
    args: dict[str, Any] = {"hz": 20.0, "nvml": False, "follow_children": False, "env": {},
                            "sys_root": "/", "push": sink.push, "diag": sink.diag}
    args.update(kw)
    return SamplerProcess(**args)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_for(cond: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def test_rows_of_this_process_reach_the_parent() -> None:
    sink = Sink()
    sp = make(sink)
    sp.start()
    assert sp.pid is not None and sp.pid != os.getpid()
    assert wait_for(lambda: (sp.pump(), sink.metrics()["cpu.util_pct"] >= 5)[1])
    sp.stop()
    assert not alive(sp.pid)
    m = sink.metrics()
    assert m["process.rss_bytes"] == m["cpu.util_pct"] >= 5
    rss = [r[3] for r in sink.rows if r[2] == "process.rss_bytes"]
    import psutil

    mine = psutil.Process().memory_info().rss  # the parent's RSS, not the sampler's own
    assert all(abs(v - mine) < 0.5 * mine for v in rss)
    assert all(isinstance(r[0], int) and r[1] is None and r[4] in ("%", "B", "B/s", "count")
               for r in sink.rows)
    status = sp.status
    assert status["psutil"] == "ok" and status["process"] == sp.pid
    assert status["ticks"] == m["cpu.util_pct"]  # every tick arrived, the last one too
    assert "ended" not in status and not sink.diags
    ts = [r[0] for r in sink.rows]
    assert abs(ts[-1] - time.time_ns()) < 5e9  # the same wall clock as the parent


def test_follows_the_worker_processes_it_is_told_about() -> None:
    worker = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sink = Sink()
        sp = make(sink)
        sp.start()
        sp.set_workers(frozenset({worker.pid}))
        assert wait_for(lambda: (sp.pump(), sink.metrics()["dataloader.workers"] >= 4)[1])
        sp.stop()
    finally:
        worker.kill()
        worker.wait()
    busy = [r[3] for r in sink.rows if r[2] == "dataloader.workers_cpu_pct"]
    assert {r[3] for r in sink.rows if r[2] == "dataloader.workers"} == {1.0}
    assert max(busy) > 10  # a spinning worker (well above an idle one; the box may be loaded)


def test_without_hooks_it_follows_children_but_not_itself() -> None:
    sink = Sink()
    sp = make(sink, follow_children=True)
    sp.start()
    # a few samples: the sampler process may take a while to start on a loaded machine
    got = wait_for(lambda: (sp.pump(), sink.metrics()["cpu.util_pct"] >= 3)[1])
    others = [c for c in psutil.Process().children(recursive=True) if c.pid != sp.pid]
    sp.stop()
    assert got
    # the sampler process is not a worker (children that earlier tests of a full run left
    # behind, e.g. a process pool still shutting down, are: checked only without them)
    if not others:
        assert sink.metrics()["dataloader.workers"] == 0


def test_stops_when_its_parent_dies() -> None:
    script = textwrap.dedent("""
        import sys, time
        from stepscope.capture.samplers.remote import SamplerProcess
        sp = SamplerProcess(hz=20.0, nvml=False, follow_children=False, env={}, sys_root="/",
                            push=lambda rows: None, diag=lambda *a: None)
        sp.start()
        print(sp.pid, flush=True)
        time.sleep(0.3)
        import os
        os._exit(3)  # no stop(): a crash
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 3
    child = int(out.stdout.split()[0])
    assert wait_for(lambda: not alive(child), 5.0)


def test_ctrl_c_of_the_process_group_does_not_stop_it() -> None:
    sink = Sink()
    sp = make(sink)
    sp.start()
    assert sp.pid is not None
    assert wait_for(lambda: (sp.pump(), sink.metrics()["cpu.util_pct"] >= 2)[1])
    os.kill(sp.pid, signal.SIGINT)
    before = sink.metrics()["cpu.util_pct"]
    time.sleep(0.4)
    sp.pump()
    assert alive(sp.pid) and sink.metrics()["cpu.util_pct"] > before
    sp.stop()


def test_a_child_that_cannot_start_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_mod, "_CHILD", textwrap.dedent("""
        import json, sys
        sys.stdout.write(json.dumps({"diag": ["warning", "sampler_process_failed",
                                              "the sampler process could not start: boom"]}) + "\\n")
        sys.exit(1)
    """))
    sink = Sink()
    sp = make(sink)
    sp.start()
    assert sp.pid is not None
    wait_for(lambda: not alive(sp.pid))  # type: ignore[arg-type]
    sp.stop()
    assert sink.diags == [("warning", "sampler_process_failed",
                           "the sampler process could not start: boom")]
    assert sp.status["ended"] == "exit status 1 before reporting its ticks"
    assert sink.rows == []


def test_a_forked_copy_leaves_the_sampler_process_alone() -> None:
    sink = Sink()
    sp = make(sink)
    sp.start()
    assert sp.pid is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:  # the DataLoader worker's copy: stop() and set_workers() do nothing
        sp.set_workers(frozenset({1}))
        sp.stop()
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.2)
    assert alive(sp.pid)
    sp.pump()
    n = sink.metrics()["cpu.util_pct"]
    time.sleep(0.3)
    sp.pump()
    assert sink.metrics()["cpu.util_pct"] > n and sink.metrics()["dataloader.workers"] == 0
    sp.stop()
    assert not alive(sp.pid)


def test_a_line_split_between_reads_is_read_whole() -> None:
    sink = Sink()
    sp = make(sink)
    r, w = os.pipe()
    os.set_blocking(r, False)

    class Fake:
        stdin = None
        stdout = os.fdopen(r, "rb")

    sp._proc, sp._owner = Fake(), os.getpid()  # type: ignore[assignment]
    try:
        os.write(w, b'{"rows": [[1, null, "x", 2.0, "%"]]}\n{"rows": [[2, 0, "gpu.y"')
        sp.pump()
        assert sink.rows == [(1, None, "x", 2.0, "%")]
        os.write(w, b', 3.5, "W"]]}\nnot json\n')
        sp.pump()
        assert sink.rows[1:] == [(2, 0, "gpu.y", 3.5, "W")]
        assert [d[1] for d in sink.diags] == ["sampler_process_output"]
    finally:
        os.close(w)
        Fake.stdout.close()
