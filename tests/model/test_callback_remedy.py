"""``remove_callback``: a host callback taken out of a compiled step. Hand-built steps with
hand-computed replays (a callback that stalls the GPU; one that overlaps GPU work and so
saves nothing), the host time the callback ranges hold, and the H100 runs of the
``jax_host_callback`` plant through ``record`` and through XSpace against its measured fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.model.test_stepmodel import model

from stepscope.advisor import advise
from stepscope.advisor.remedies import RemedyAdvice
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.stepmodel import replay
from stepscope.model.stepmodel.callback_remedy import (
    ANY_THREAD,
    Ranges,
    drop_host_work,
    host_cut,
    short_name,
)
from stepscope.model.stepmodel.steps import CopyDir, HostKind, OpKind, StepModel, SyncRole
from stepscope.store import Run

DATA = Path(__file__).resolve().parents[1] / "data"
L, K = HostKind.LAUNCH, HostKind.BLOCK
US = 1_000


def _ranges(*spans: tuple[int, int, int]) -> Ranges:
    """(start, end, thread) in us."""
    return Ranges(np.array([s[0] * US for s in spans], dtype=np.int64),
                  np.array([s[1] * US for s in spans], dtype=np.int64),
                  np.array([s[2] for s in spans], dtype=np.int64))


def _stalling_step() -> tuple[StepModel, np.ndarray]:
    """One thread, times in us. A 200 us kernel launched at 10 (10..210); the callback thunk
    [215, 800): its D2H copy call at 215 (5 us; the 30 us copy runs 215..245) and the sync at
    220 that waits for it (5 us after the wait: 250), then 550 us of Python; the rest of the
    step: 5 us of host work, a 5 us kernel launched at 805 (the call 5 us), 5 us of tail."""
    m = model([(0, L, 10 * US, 5 * US),  # 1: kernel A at 10
               (0, L, 200 * US, 5 * US),  # 2: the copy call at 215
               (0, K, 0, 5 * US),  # 3: the sync at 220, waits for the copy
               (0, L, 555 * US, 5 * US)],  # 4: kernel B at 805
              [(1, 0, 200 * US, 0), (2, 0, 30 * US, 0), (4, 0, 5 * US, 0)],
              wait={3: 0}, role={3: SyncRole.READBACK}, tail=5 * US)
    m = m.with_host(copy=np.array([0, 0, CopyDir.DTOH, CopyDir.DTOH, 0], dtype=np.int8))
    m = m.with_ops(kind=np.array([OpKind.KERNEL, OpKind.MEMCPY, OpKind.KERNEL],
                                 dtype=np.int8), nbytes=np.array([0, 2048, 0], dtype=np.int64))
    return m, np.array([0, 10, 215, 220, 805], dtype=np.int64) * US


def test_the_measured_stalling_step() -> None:
    # the host: 10 + 5, 200 + 5, the wait to 245 + 5, 555 + 5, tail 5 = 815 us; the GPU is
    # idle from 245 to 805 (B ends at 810, before the next step's A is launched at 825)
    m, _ = _stalling_step()
    assert replay(m).step_ns == pytest.approx(815 * US)


def test_a_callback_that_stalls_the_gpu() -> None:
    m, start = _stalling_step()
    # thunk [215, 800): event 2's pre [15, 215) is not in it; events 2 and 3 start in it;
    # event 4's pre [250, 805) holds [250, 800) = 550 us of it; the tail [810, 815) none
    cut = host_cut(m, start, 815 * US, _ranges((215, 800, 0)))
    assert cut.inside.tolist() == [False, False, True, True, False]
    assert cut.pre.tolist() == [0, 0, 0, 0, 550 * US]
    assert cut.tail.tolist() == [0]
    x = drop_host_work(m, cut)
    assert x.host.kind.tolist() == [HostKind.MARK, L, L, L, L]  # the sync waits no more
    assert x.host.own.tolist() == [0, 5 * US, 0, 0, 5 * US]
    assert x.host.pre.tolist() == [0, 10 * US, 200 * US, 0, 5 * US]
    assert x.ops.dur.tolist() == [200 * US, 0, 5 * US]  # the copy goes, the kernels stay
    # what stays on the host: 10 + 5 + 200 (the host work before the thunk) + 5 + 5 + 5 =
    # 230 us; the GPU's 205 us fit in it (A starts at 10, after the last step's B): the
    # step is the host's. Saved: the Python 550, the two calls 10 and the wait 25 (220 -> 245)
    assert replay(x).step_ns == pytest.approx(230 * US)


def test_a_callback_that_overlaps_gpu_work_saves_nothing() -> None:
    # stream 1 runs a 2 ms kernel (launched at 10) and a 100 us one (launched at 540) each
    # step: 2100 us of GPU per step, the pace. The callback's operand comes from a 10 us
    # kernel on stream 0 (launched at 20); the thunk [25, 540): its copy call at 25 (5 us on
    # stream 0, 30..35), the sync at 30 waiting for stream 0 only (to 35, +5), 500 us of Python
    m = model([(0, L, 10 * US, 5 * US), (0, L, 5 * US, 5 * US), (0, L, 0, 5 * US),
               (0, K, 0, 5 * US), (0, L, 500 * US, 5 * US)],
              [(1, 1, 2_000 * US, 0), (2, 0, 10 * US, 0), (3, 0, 5 * US, 0),
               (5, 1, 100 * US, 0)], streams=2, wait={4: 0}, role={4: SyncRole.READBACK})
    m = m.with_ops(kind=np.array([OpKind.KERNEL, OpKind.KERNEL, OpKind.MEMCPY,
                                  OpKind.KERNEL], dtype=np.int8))
    start = np.array([0, 10, 20, 25, 30, 540], dtype=np.int64) * US
    before = replay(m).step_ns
    assert before == pytest.approx(2_100 * US)
    cut = host_cut(m, start, 545 * US, _ranges((25, 540, 0)))
    assert cut.inside.tolist() == [False, False, False, True, True, False]
    assert cut.pre.tolist() == [0, 0, 0, 0, 0, 500 * US]  # [40, 540) of event 5's pre
    x = drop_host_work(m, cut)
    assert x.ops.dur.tolist() == [2_000 * US, 10 * US, 0, 100 * US]
    assert replay(x).step_ns == pytest.approx(before)  # stream 1 still sets the pace


def test_ranges_on_another_thread() -> None:
    # thread 0 runs the thunk [100, 600): its call at 100 starts in it, its call at 605 has
    # [105, 605) of host work before it, [105, 600) in the thunk; thread 1 calls at 50, then
    # issues nothing until 700: its gap [55, 700) holds the whole thunk (a transfer thread the
    # step drives, waiting for it)
    m = model([(1, L, 50 * US, 5 * US), (0, L, 100 * US, 5 * US), (0, L, 500 * US, 5 * US),
               (1, L, 645 * US, 5 * US)], [], threads=2)
    start = np.array([0, 50, 100, 605, 700], dtype=np.int64) * US
    cut = host_cut(m, start, 700 * US, _ranges((100, 600, 0)))
    assert cut.pre.tolist() == [0, 0, 0, 495 * US, 500 * US]
    assert cut.inside.tolist() == [False, False, True, False, False]
    # a thread 1 that calls at 300, during the thunk, was not waiting for it: it keeps its
    # time ([55, 300) does not hold the thunk)
    busy = m.with_host(pre=np.array([0, 50, 100, 500, 245], dtype=np.int64) * US)
    start2 = np.array([0, 50, 100, 605, 300], dtype=np.int64) * US
    assert host_cut(busy, start2, 700 * US, _ranges((100, 600, 0))).pre[4] == 0
    # a range of unknown thread counts on every thread, where it overlaps
    any_t = host_cut(busy, start2, 700 * US, _ranges((100, 600, ANY_THREAD)))
    assert any_t.pre.tolist() == [0, 0, 0, 495 * US, 200 * US]
    assert any_t.inside.tolist() == [False, False, True, False, True]


def test_the_tail_inside_a_callback() -> None:
    m = model([(0, L, 10 * US, 5 * US)], [(1, 0, 20 * US, 0)], tail=300 * US)
    cut = host_cut(m, np.array([0, 10 * US], dtype=np.int64), 315 * US, _ranges((100, 250, 0)))
    assert cut.tail.tolist() == [150 * US]
    assert drop_host_work(m, cut).tail.tolist() == [150 * US]
    assert not host_cut(m, np.array([0, 10 * US], dtype=np.int64), 315 * US,
                        _ranges((400, 500, 0))).inside.any()


def test_short_names() -> None:
    assert short_name("Thunk:#name=jit(f)/debug_callback,hlo_op=debug_callback.1,"
                      "unique_hlo_op_id=7#") == "debug_callback.1"
    assert short_name("pure_callback.3") == "pure_callback.3"


# -- the H100 runs of the jax_host_callback plant (tests/data/PROVENANCE.md) ----------------
# measured untraced (program.py's own loop, 3 alternating rounds): 13.609 -> 2.585 ms (81.0%);
# the first plant (8 MiB operand, tests/data/xspace/PROVENANCE.md): 6.54 -> 2.61 ms
STEADY = (13.609, 2.585)
FIRST = (6.54, 2.61)


def _advice(run: Run) -> RemedyAdvice:
    adv = advise(analyze(run, workers=1)).remedies
    assert adv is not None
    return adv


@pytest.mark.parametrize("source, measured", [
    ("recorded/h100_jax_host_callback", STEADY),
    ("xspace/jax_host_callback_steady_h100.xplane.pb.gz", STEADY),
    ("xspace/jax_host_callback_h100.xplane.pb.gz", FIRST),
])
def test_the_plant_through_record_and_xspace(tmp_path: Path, source: str,
                                              measured: tuple[float, float]) -> None:
    path = DATA / source
    run = Run(path) if path.is_dir() else Run(import_traces([path], tmp_path / "run"))
    adv = _advice(run)
    got = {r.id: r for r in adv.remedies}
    r = got["remove_callback"]
    assert "host_bound" in r.finding_ids
    assert "debug_callback" in r.evidence[0]
    # predicted fixed step = measured baseline x predicted / the step it is relative to
    base, fixed = measured
    assert base * r.predicted_step_ms / r.baseline_ms == pytest.approx(fixed, rel=0.3)
    # the callback is the step's fix: no other remedy comes near, and the plan is its own
    assert all(o.est_saving_pct < 10 for k, o in got.items() if k != "remove_callback")
    assert adv.plan is not None and "remove_callback" in adv.plan.remedy_ids
    assert adv.plan.predicted_step_ms == pytest.approx(r.predicted_step_ms, rel=0.05)


def test_no_callback_no_remedy() -> None:
    adv = _advice(Run(DATA / "recorded" / "h100_cpu_ops_midstep"))
    assert "remove_callback" not in {r.id for r in adv.remedies}
