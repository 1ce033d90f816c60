"""CPU time of stepscope's own threads over a window (chunks.threads_cpu_s / cpu_since)."""

from __future__ import annotations

import sys
import threading

import pytest

from stepscope.capture.chunks import cpu_since, threads_cpu_s


def test_cpu_since_never_negative_when_a_thread_ended() -> None:
    # a thread that ran at the window's open and ended before its close (the GPU backend's
    # preparing thread, a timer) is gone from the second reading: a difference of the two
    # totals (1.5 - 2.0) read -0.5 s before; per thread it is what the survivors used
    before = {11: 2.0, 12: 0.5}
    after = {12: 1.5}
    assert cpu_since(before, after) == pytest.approx(1.0)


def test_cpu_since_counts_a_new_thread_from_zero() -> None:
    assert cpu_since({1: 0.25}, {1: 0.5, 2: 0.75}) == pytest.approx(1.0)


def test_cpu_since_unavailable() -> None:
    assert cpu_since(None, {1: 1.0}) is None
    assert cpu_since({1: 1.0}, None) is None
    assert cpu_since({}, {}) is None  # no stepscope thread at either reading


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_threads_cpu_s_reads_named_threads_only() -> None:
    started, done = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        x = 0
        while not done.is_set():
            x += 1

    t = threading.Thread(target=spin, name="stepscope-test-spin", daemon=True)
    other = threading.Thread(target=done.wait, name="not-ours", daemon=True)
    t.start()
    other.start()
    started.wait()
    try:
        first = threads_cpu_s()
        assert first is not None and t.native_id in first and other.native_id not in first
        done.wait(0.3)
        second = threads_cpu_s()
    finally:
        done.set()
        t.join()
        other.join()
    assert second is not None
    used = cpu_since(first, second)
    assert used is not None and used > 0.0  # the spinning thread used CPU (10 ms ticks)
