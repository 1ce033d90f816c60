"""Launch analysis on hand-built runs (times in the builder are µs; results are ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import imported, marker_windows
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.launches import analyze_launches, launch_intervals
from stepscope.store.run import Run

US = 1000


def W(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Step windows from (start, end) pairs in µs."""
    return (np.array([int(a * US) for a, _ in pairs], dtype=np.int64),
            np.array([int(b * US) for _, b in pairs], dtype=np.int64))


def test_two_short_kernels_after_their_launches(builder: Any, tmp_path: Path) -> None:
    # two launches of 5 µs (10-15, 20-25); kernels of 2 µs start 3 µs after each launch ends
    # (18-20, 28-30) -> queue 3 µs each; both kernels (2 µs) shorter than their launch (5 µs).
    # GPU busy [18,20) and [28,30): the gap [20,28) = 8 µs is launch-bound (the second launch
    # ended at 25 > 20) and short (< 100 µs).
    b = builder.step(0, 100)
    b.kernel("k", 18, 2, launch=(10, 5)).kernel("k", 28, 2, launch=(20, 5))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert (a.launches, a.paired, a.graph_launches) == (2, 2, 0)
    assert a.median_api_ns == 5000 and a.mean_api_ns == 5000
    assert a.median_queue_ns == 3000 and a.negative_queue == 0
    assert (a.short_kernels, a.short_kernel_share, a.short_kernel_gpu_ns) == (2, 1.0, 4000)
    assert a.launches_per_step == (2,) and a.launch_api_ns_per_step == (10_000,)
    assert a.short_kernels_per_step == (2,)
    assert a.launch_idle_ns_per_step == (8000,) and a.launch_idle_short_ns_per_step == (8000,)
    assert a.launch_idle_long_ns_per_step == (0,) and a.launch_idle_gaps_per_step == (1,)
    assert a.mean_launches_per_step == 2.0 and a.mean_launch_idle_ns_per_step == 8000.0


def test_gpu_bound_queue_is_not_launch_bound(builder: Any, tmp_path: Path) -> None:
    # launch A 10-15 -> kernel 16-56 (40 µs, queue 1 µs); launch B 20-25 -> kernel 60-70
    # (queue 35 µs). The gap [56,60) is not launch-bound: B's call ended at 25 < 56.
    # Median queue = (1 + 35) / 2 = 18 µs. No kernel is shorter than its 5 µs launch.
    b = builder.step(0, 100)
    b.kernel("a", 16, 40, launch=(10, 5)).kernel("b", 60, 10, launch=(20, 5))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert a.median_queue_ns == 18_000 and a.mean_queue_ns == 18_000
    assert a.short_kernels == 0 and a.short_kernel_share == 0.0
    assert a.launch_idle_ns == 0 and a.launch_idle_gaps == 0


def test_negative_queue_delay_is_clipped_and_counted(builder: Any, tmp_path: Path) -> None:
    # the call ends at 15 but its kernel starts at 14: raw queue -1 µs -> 0, counted once
    b = builder.step(0, 100)
    b.kernel("k", 14, 10, launch=(10, 5))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert a.negative_queue == 1 and a.median_queue_ns == 0


def test_graph_launch_pairs_with_all_its_kernels(builder: Any, tmp_path: Path) -> None:
    # cudaGraphLaunch 10-20 with two kernels (25-28, 30-34) under its correlation:
    # queue = 25 - 20 = 5 µs; GPU time 3 + 4 = 7 µs < 10 µs call -> short, 7 µs of GPU time
    b = builder.step(0, 100)
    b.api("cudaGraphLaunch", 10, 10, correlation=77)
    b.kernel("g1", 25, 3, correlation=77).kernel("g2", 30, 4, correlation=77)
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert (a.launches, a.graph_launches, a.paired) == (1, 1, 1)
    assert a.median_queue_ns == 5000
    assert (a.short_kernels, a.short_kernel_gpu_ns) == (1, 7000)


def test_long_gap_straddling_a_step_boundary_is_split(builder: Any, tmp_path: Path) -> None:
    # kernel A 20-30 (launch 10-12), kernel B 150-160 (launch 140-145): the gap [30,150)
    # is launch-bound (145 > 30) and long (120 µs > 100 µs). Clipped to the windows:
    # step 0 gets 30..100 = 70 µs, step 1 gets 100..150 = 50 µs; the gap counts in step 0.
    b = builder.step(0, 100).step(100, 100)
    b.kernel("a", 20, 10, launch=(10, 2)).kernel("b", 150, 10, launch=(140, 5))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100), (100, 200)))
    assert a.launch_idle_ns_per_step == (70_000, 50_000)
    assert a.launch_idle_long_ns_per_step == (70_000, 50_000)
    assert a.launch_idle_short_ns_per_step == (0, 0)
    assert a.launch_idle_gaps_per_step == (1, 0)
    assert (a.launch_idle_ns, a.launch_idle_long_ns, a.launch_idle_short_ns) == (120_000, 120_000, 0)
    assert a.mean_launch_idle_long_ns_per_step == 60_000.0
    assert a.launches_per_step == (1, 1)
    # with a 200 µs threshold the same gap is short
    a2 = analyze_launches(rank_graph(Run(tmp_path / "r"), 0), *W((0, 100), (100, 200)), long_gap_ns=200_000)
    assert a2.launch_idle_short_ns_per_step == (70_000, 50_000)


def test_copies_issued_late_count_and_unknown_issuers_do_not(builder: Any, tmp_path: Path) -> None:
    # kernel 10-20 (launch 0-5); HtoD copy 30-40 issued by cudaMemcpyAsync 22-28: 28 > 20 ->
    # the gap [20,30) = 10 µs is launch-bound. A copy 50-60 with no API call in the trace:
    # the gap [40,50) is not attributed. Copies are not "launches".
    b = builder.step(0, 100)
    b.kernel("k", 10, 10, launch=(0, 5))
    b.memcpy("HtoD", 30, 10, 1024, api=("cudaMemcpyAsync", 22, 6))
    b.memcpy("HtoD", 50, 10, 1024)
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert a.launch_idle_ns == 10_000 and a.launch_idle_gaps == 1
    assert a.launches == 1


def test_devices_are_independent_and_streams_merge(builder: Any, tmp_path: Path) -> None:
    # device 0: kernels 10-20 (stream 7) and 15-22 (stream 8) merge into [10,22);
    # next kernel 40-50 launched 30-35 -> launch-bound gap [22,40) = 18 µs.
    # device 1: one kernel 25-45: no gap of its own; merging devices would have hidden
    # most of device 0's gap.
    b = builder.step(0, 100)
    b.kernel("a", 10, 10, stream=7, launch=(0, 5)).kernel("b", 15, 7, stream=8, launch=(6, 2))
    b.kernel("c", 40, 10, launch=(30, 5)).kernel("d", 25, 20, device=1, launch=(9, 1))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert a.launch_idle_ns == 18_000


def test_empty_run_and_no_windows(builder: Any, tmp_path: Path) -> None:
    run = builder.build(tmp_path / "r")
    a = analyze_launches(rank_graph(run, 0), *W((0, 100), (100, 200)))
    assert a.launches_per_step == (0, 0) and a.launch_idle_ns_per_step == (0, 0)
    assert a.launches == 0 and a.median_api_ns == 0.0 and a.short_kernel_share == 0.0
    e = analyze_launches(rank_graph(run, 0), *W())
    assert e.n_steps == 0 and e.launches_per_step == () and e.mean_launches_per_step == 0.0
    s, t = launch_intervals(rank_graph(run, 0))
    assert s.size == 0 and t.size == 0


def test_no_windows_means_whole_rank(builder: Any, tmp_path: Path) -> None:
    # the same two launches as the first test, without any step window
    b = builder
    b.kernel("k", 18, 2, launch=(10, 5)).kernel("k", 28, 2, launch=(20, 5))
    a = analyze_launches(rank_graph(b.build(tmp_path / "r"), 0), *W())
    assert (a.launches, a.short_kernels, a.launch_idle_ns, a.launch_idle_gaps) == (2, 2, 8000, 1)
    assert a.launches_per_step == () and a.mean_launch_idle_ns_per_step == 0.0


def test_launch_intervals_add_innermost_framework_op(builder: Any, tmp_path: Path) -> None:
    # tid 100: aten::linear 0-20 > aten::addmm 5-15 > cudaLaunchKernel 8-12: the innermost
    # op [5,15) counts. aten::empty 30-40 launches nothing: not counted. A launch 50-52 with
    # no op: counted alone. tid 200 has an op 0-100 that encloses nothing of its own thread;
    # a python-kind op 45-60 on tid 100 is not a framework op.
    b = builder
    b.cpu_op("aten::linear", 0, 20).cpu_op("aten::addmm", 5, 10).cpu_op("aten::empty", 30, 10)
    b.cpu_op("aten::other_thread", 0, 100, tid=200)
    b.cpu_op("train.py(3): step", 45, 15, kind="python")
    b.kernel("k", 20, 1, launch=(8, 4)).kernel("k2", 60, 1, launch=(50, 2))
    s, e = launch_intervals(rank_graph(b.build(tmp_path / "r"), 0))
    assert s.tolist() == [5000, 50_000] and e.tolist() == [15_000, 52_000]


# -- real traces --------------------------------------------------------------------------






def test_cnn_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: 3 steps, 38.0 ms wall, GPU busy 35.4 ms, 288 kernels (96 per step)
    run = imported("h100/cnn_fp32_sync.pt.trace.json.gz", tmp_path_factory)
    ws, we = marker_windows(run)
    a = analyze_launches(rank_graph(run, 0), ws, we)
    assert a.launches_per_step == (96, 96, 96) and a.paired == 288
    # launch-bound gaps are a part of GPU idle time: at most 38.0 - 35.4 = 2.6 ms
    assert 0 < a.launch_idle_ns <= 2.7e6
    assert 0.0 < a.short_kernel_share < 1.0


def test_gpt_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: 1311 kernels over 3 steps (437 per step); GPU busy 36.3 of 119.5 ms
    run = imported("h100/gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    ws, we = marker_windows(run)
    a = analyze_launches(rank_graph(run, 0), ws, we)
    assert a.launches_per_step == (437, 437, 437) and a.paired == 1311
    assert a.launch_idle_ns <= 119.5e6 - 36.3e6
    s, e = launch_intervals(rank_graph(run, 0))
    assert np.all(s[1:] > e[:-1])  # sorted, disjoint


# -- containment helpers added to analysis/intervals.py for launches and syncs -------------


def test_containment_helpers_against_brute_force() -> None:
    from stepscope.analysis import intervals as iv

    rng = np.random.default_rng(7)
    for _ in range(200):
        n, q = int(rng.integers(0, 30)), int(rng.integers(0, 30))
        cg, qg = rng.integers(0, 3, n), rng.integers(0, 3, q)
        cs = rng.integers(0, 50, n)
        ce = cs + rng.integers(0, 30, n)
        qs = rng.integers(0, 60, q)
        qe = qs + rng.integers(0, 10, q)
        for inner in (True, False):
            got = iv.containing_by_group(cg, cs, ce, qg, qs, qe, innermost=inner)
            for i in range(q):
                cands = [j for j in range(n) if cg[j] == qg[i] and cs[j] <= qs[i] and ce[j] >= qe[i]]
                if not cands:
                    assert got[i] == -1
                    continue
                keys = {j: (int(cs[j]), -int(ce[j])) for j in [*cands, int(got[i])]}
                want = max(cands, key=keys.__getitem__) if inner else min(cands, key=keys.__getitem__)
                assert cg[got[i]] == qg[i] and keys[int(got[i])] == keys[want]


def test_group_ids() -> None:
    from stepscope.analysis import intervals as iv

    a, b = iv.group_ids(([1, 1, 2], [5, 6, 5]), ([2, 1], [5, 5]))
    assert a[0] != a[1] and a[0] != a[2] and b.tolist() == [a[2], a[0]]
    same, = iv.group_ids(([3, 3], [4, 4]))
    assert same.tolist() == [0, 0]


def test_launch_bound_gaps_without_any_api_call(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from builder import TraceBuilder
    from stepscope.analysis.launches import launch_bound_gaps

    b = TraceBuilder()
    b.kernel("a", 0, 10).kernel("b", 50, 10)  # kernels only: no launch calls to blame
    s, e = launch_bound_gaps(rank_graph(b.build(tmp_path / "r"), 0))
    assert s.size == 0 and e.size == 0


def test_dispatch_between_launches_counts_as_launching_without_framework_ops(
        builder: Any, tmp_path: Path) -> None:
    """A live capture has the CUDA calls but no framework ops: the launching thread's short
    gaps between launch calls are the eager framework's per-op dispatch (launch), a long one is
    other host work. Launches 10-14, 40-44, 60-64 (tid 1) and 300-304; another thread's call at
    45-49 does not bridge tid 1's gaps. Gaps of tid 1: 14-40 (26 µs), 44-60 (16 µs), 64-300
    (236 µs > 100 µs: not dispatch)."""
    b = builder.step(0, 400)
    for ts, corr in ((10, 1), (40, 2), (60, 3), (300, 4)):
        b.api("cudaLaunchKernel", ts, 4, correlation=corr, tid=1)
    b.api("cudaLaunchKernel", 45, 4, correlation=5, tid=2)
    s, e = launch_intervals(rank_graph(b.build(tmp_path / "r"), 0))
    assert list(zip((s // US).tolist(), (e // US).tolist(), strict=True)) == [
        (10, 64), (300, 304)]


def test_framework_ops_keep_their_own_dispatch(builder: Any, tmp_path: Path) -> None:
    """With framework ops recorded (a torch.profiler trace), the op around each launch is the
    dispatch, and the gaps between ops are not added."""
    b = builder.step(0, 400)
    b.cpu_op("aten::mul", 5, 12, kind="framework", tid=1).api("cudaLaunchKernel", 10, 4, tid=1)
    b.cpu_op("aten::add", 35, 12, kind="framework", tid=1).api("cudaLaunchKernel", 40, 4, tid=1)
    s, e = launch_intervals(rank_graph(b.build(tmp_path / "r"), 0))
    assert list(zip((s // US).tolist(), (e // US).tolist(), strict=True)) == [(5, 17), (35, 47)]
