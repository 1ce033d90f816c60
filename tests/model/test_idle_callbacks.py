"""Host callbacks inside the step (``analysis.callbacks``): the GPU idle inside an XLA
host-callback thunk is the callback's host work (host_bound), not the sync of its copy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder import TraceBuilder
from stepscope.analysis import analyze
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.callbacks import is_callback
from stepscope.model.idle import split_idle

THUNK = "Thunk:#name=jit(train_step)/jvp()/debug_callback,hlo_op=debug_callback.1,unique_hlo_op_id=7#"


def test_callback_names() -> None:
    assert is_callback("debug_callback.1") and is_callback(THUNK)
    assert is_callback("pure_callback.3") and is_callback("io_callback")
    assert is_callback("Thunk:#hlo_op=xla_ffi_python_gpu_callback.2#")
    assert not is_callback("my_debug_callback_helper") and not is_callback("callback")
    assert not is_callback("Thunk:#hlo_op=command_buffer_4#")


def _run(tmp_path: Path, with_thunk: bool) -> TraceBuilder:
    # per 1000 us step: a 200 us kernel, then inside the callback thunk [210, 810) a D2H copy
    # call that waits for it ([210, 260), the copy on the GPU [220, 250)) and 550 us of
    # Python; then the rest of the step: a 150 us kernel launched at 820
    b = TraceBuilder()
    for i in range(4):
        t = i * 1000.0
        b.step(t, 1000)
        b.kernel("gemm_a", t + 5, 200, launch=(t + 1, 3))
        if with_thunk:
            b.annotation(THUNK, t + 210, 600)
        b.memcpy("DtoH", t + 220, 30, 8 << 20, dst="pageable",
                 api=("cudaMemcpyAsync", t + 210, 50))
        b.sync("cudaStreamSynchronize", t + 260, 5)
        b.kernel("gemm_b", t + 825, 150, launch=(t + 820, 3))
    b.build(tmp_path / "run")
    return b


def test_idle_inside_a_callback_thunk_is_host_work(tmp_path: Path) -> None:
    from stepscope.store.run import Run

    _run(tmp_path / "a", True)
    analysis = analyze(Run(tmp_path / "a" / "run"))
    split = split_idle(analysis, analysis.ranks[0])
    # GPU idle inside the thunk per step: [210, 220) + [250, 810) = 570 us, all host work
    # (the 15 us before the next kernel, [810, 825), is its launch wait); the copy's sync
    # claims nothing there
    assert split.mean_ms(split.host) == pytest.approx(0.570, abs=0.002)
    assert split.mean_ms(split.sync_blocked) == pytest.approx(0.0, abs=1e-6)
    thunks = IntervalSet.of(np.arange(4) * 1_000_000 + 210_000, np.arange(4) * 1_000_000 + 810_000)
    assert (split.sync_drain & thunks).total_ns == 0  # at most the idle after the thunk

    _run(tmp_path / "b", False)  # the same timeline without the thunk's annotation
    analysis = analyze(Run(tmp_path / "b" / "run"))
    split = split_idle(analysis, analysis.ranks[0])
    assert split.mean_ms(split.sync_blocked) > 0.005  # the copy call's wait counts as a sync


def _copying_callback(tmp_path: Path, with_thunk: bool) -> Path:
    # per 2000 us step: a 400 us kernel; inside the callback thunk [410, 1610) the operand's
    # 8 MiB pageable D2H copy (the call blocks [410, 920), the copy runs [420, 920)), its
    # stream sync, then Python; then a 300 us kernel launched at 1620
    b = TraceBuilder()
    for i in range(5):
        t = i * 2000.0
        b.step(t, 2000)
        b.kernel("gemm_a", t + 5, 400, launch=(t + 1, 3))
        if with_thunk:
            b.annotation(THUNK, t + 410, 1200)
        b.memcpy("DtoH", t + 420, 500, 8 << 20, dst="pageable",
                 api=("cudaMemcpyAsync", t + 410, 510))
        b.sync("cudaStreamSynchronize", t + 920, 5)
        b.kernel("gemm_b", t + 1625, 300, launch=(t + 1620, 3))
    b.build(tmp_path / "run")
    return tmp_path / "run"


def test_a_callbacks_own_copy_goes_with_the_callback(tmp_path: Path) -> None:
    from stepscope.advisor.engine import advise
    from stepscope.advisor.rules import host_bound
    from stepscope.model.pageable import pageable_copies
    from stepscope.store.run import Run

    analysis = analyze(Run(_copying_callback(tmp_path / "a", True)))
    ra = analysis.ranks[0]
    split = split_idle(analysis, ra)
    # idle inside the thunk: [410, 420) + [920, 1610) = 700 us; the copy, [420, 920), is the
    # thunk's copy-only GPU time
    assert split.mean_ms(split.callback) == pytest.approx(0.700, abs=0.002)
    assert split.mean_ms(split.callback_copy) == pytest.approx(0.500, abs=0.002)
    assert (split.callback - split.host).total_ns == 0  # the callbacks' idle is host work
    # the copy is XLA's (its buffer cannot be pinned): pageable_memcpy does not count it
    assert pageable_copies(analysis.graph.rank(0), ra) is None
    found = advise(analysis, [host_bound.RULE]).findings
    assert len(found) == 1
    # saving: the idle inside the thunk plus its copy (what removing the callback removes)
    assert found[0].est_saving_ms == pytest.approx(0.700 + 0.500, abs=0.005)
    assert found[0].fix == host_bound.CALLBACK_FIX
    assert "idles or copies for host callbacks" in found[0].title  # the copies: 42% of it
    assert "host callbacks inside the compiled step" in " ".join(found[0].evidence)

    # the same timeline without the thunk: a plain pageable copy, the general host fix
    analysis = analyze(Run(_copying_callback(tmp_path / "b", False)))
    split = split_idle(analysis, analysis.ranks[0])
    assert split.callback.total_ns == 0 and split.callback_copy.total_ns == 0
    pc = pageable_copies(analysis.graph.rank(0), analysis.ranks[0])
    assert pc is not None and pc.count == len(split.steps)
    found = advise(analysis, [host_bound.RULE]).findings
    assert len(found) == 1 and found[0].fix == host_bound.FIX
    assert "GPU idles 0." in found[0].title
    assert found[0].est_saving_ms < 0.700  # the copy's sync and drain are sync_calls' claims
