"""Input-pipeline analysis on hand-built runs (times in the builder are µs; results are ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import imported, marker_windows
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.input import analyze_input, input_wait_intervals

US = 1000


def W(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([int(a * US) for a, _ in pairs], dtype=np.int64),
            np.array([int(b * US) for _, b in pairs], dtype=np.int64))


def test_waits_per_step_and_gpu_idle(builder: Any, tmp_path: Path) -> None:
    # three 100 µs steps; waits [0,30) | [100,105) | [200,210) + [250,252)
    #   wait 30, 5, 12 µs; count 1, 1, 2; share 0.30, 0.05, 0.12
    #   mean 47/3 µs, median 12 µs, max 30 µs; first 30 µs, mean of the others 8.5 µs
    # GPU: kernel [10,20) in step 0, memcpy [100,102) in step 1
    #   idle while waiting: 30-10 = 20, 5-2 = 3, 12 µs
    b = builder.step(0, 100).step(100, 100).step(200, 100)
    b.input_wait(0, 30).input_wait(100, 5).input_wait(200, 10).input_wait(250, 2)
    b.kernel("k", 10, 10).memcpy("HtoD", 100, 2, 64)
    a = analyze_input(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100), (100, 200), (200, 300)))
    assert a.wait_ns_per_step == (30_000, 5000, 12_000)
    assert a.count_per_step == (1, 1, 2)
    assert a.share_per_step == pytest.approx((0.30, 0.05, 0.12))
    assert a.gpu_idle_wait_ns_per_step == (20_000, 3000, 12_000)
    assert a.mean_wait_ns_per_step == pytest.approx(47_000 / 3)
    assert (a.median_wait_ns_per_step, a.max_wait_ns_per_step) == (12_000, 30_000)
    assert a.mean_share == pytest.approx(0.47 / 3)
    assert (a.first_step_wait_ns, a.mean_wait_ns_excl_first) == (30_000, 8500)
    assert a.first_step_outlier is False  # 30 µs < 2 * 8.5 µs + 1 ms
    assert (a.count, a.wait_ns, a.gpu_idle_wait_ns) == (4, 47_000, 35_000)
    assert a.mean_gpu_idle_wait_ns_per_step == pytest.approx(35_000 / 3)
    assert a.dataloader is None


def test_straddling_and_overlapping_waits(builder: Any, tmp_path: Path) -> None:
    # a wait [90,120) is split by the boundary: 10 µs in step 0, 20 µs in step 1, and counted
    # in step 0 (its start). Two threads waiting [10,20) and [15,25) at once: 15 µs, not 20.
    b = builder.step(0, 100).step(100, 100)
    b.input_wait(90, 30).input_wait(10, 10).input_wait(15, 10, tid=200)
    run = b.build(tmp_path / "r")
    a = analyze_input(rank_graph(run, 0), *W((0, 100), (100, 200)))
    assert a.wait_ns_per_step == (25_000, 20_000) and a.count_per_step == (3, 0)
    s, e = input_wait_intervals(rank_graph(run, 0))
    assert s.tolist() == [10_000, 90_000] and e.tolist() == [25_000, 120_000]


def test_first_step_outlier(builder: Any, tmp_path: Path) -> None:
    # 10 ms steps waiting 5 ms, 0.1 ms, 0.2 ms: the others' median is 0.15 ms, so the first
    # (worker start-up) exceeds 2 * 0.15 + 1 = 1.3 ms and is flagged
    b = builder.step(0, 10_000).step(10_000, 10_000).step(20_000, 10_000)
    b.input_wait(0, 5000).input_wait(10_000, 100).input_wait(20_000, 200)
    a = analyze_input(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 1e4), (1e4, 2e4), (2e4, 3e4)))
    assert a.first_step_outlier is True and a.first_step_wait_ns == 5_000_000
    assert a.mean_wait_ns_excl_first == 150_000


def test_dataloader_settings(builder: Any, tmp_path: Path) -> None:
    settings = {"dataloader": {"num_workers": 4, "pin_memory": True, "prefetch_factor": 2}}
    a = analyze_input(rank_graph(builder.build(tmp_path / "r", settings=settings), 0), *W((0, 100)))
    assert a.dataloader == {"num_workers": 4, "pin_memory": True, "prefetch_factor": 2}


def test_empty_and_no_windows(builder: Any, tmp_path: Path) -> None:
    builder.input_wait(10, 5).input_wait(40, 5)
    run = builder.build(tmp_path / "r")
    # no windows: totals over the rank, with no GPU work all of it idle; no per-step figures
    a = analyze_input(rank_graph(run, 0), *W())
    assert (a.count, a.wait_ns, a.gpu_idle_wait_ns) == (2, 10_000, 10_000)
    assert a.wait_ns_per_step == () and a.mean_wait_ns_per_step == 0.0
    assert a.first_step_outlier is False and a.max_wait_ns_per_step == 0
    # a window with no wait in it
    z = analyze_input(rank_graph(run, 0), *W((100, 200)))
    assert z.wait_ns_per_step == (0,) and z.share_per_step == (0.0,) and z.count == 0


# -- real traces --------------------------------------------------------------------------






def test_gpt_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # the trace's three "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" ranges
    # last 307.039, 87.251 and 180.286 µs, one inside each ProfilerStep
    run = imported("h100/gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    a = analyze_input(rank_graph(run, 0), *marker_windows(run))
    assert a.count_per_step == (1, 1, 1)
    assert a.wait_ns_per_step == pytest.approx((307_039, 87_251, 180_286), abs=2)
    assert all(0 <= i <= w for i, w in zip(a.gpu_idle_wait_ns_per_step, a.wait_ns_per_step))
    assert a.share_per_step[0] < 0.01  # 0.3 ms of a ~40 ms step


def test_cnn_fixture_has_no_loader(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = imported("h100/cnn_fp32_sync.pt.trace.json.gz", tmp_path_factory)
    a = analyze_input(rank_graph(run, 0), *marker_windows(run))
    assert a.wait_ns_per_step == (0, 0, 0) and a.dataloader is None


def test_loader_settings_per_rank_from_capture_and_run_wide_fallback() -> None:
    from stepscope.analysis.input import loader_settings

    captured = {"ranks": {"rank1": {"host": {"dataloader": {"num_workers": 2}}}}}
    assert loader_settings(captured, 1) == {"num_workers": 2}
    assert loader_settings(captured, 0) is None
    assert loader_settings({"dataloader": {"num_workers": 0}}, 3) == {"num_workers": 0}
    assert loader_settings({}, 0) is None


def test_input_verdict_tiers() -> None:
    # the TF Profiler's tiers: above 20% highly, 5% to 20% moderately, below 5% not
    from stepscope.analysis.input import input_verdict
    assert input_verdict(20.01) == "highly"
    assert input_verdict(20.0) == input_verdict(5.0) == "moderately"
    assert input_verdict(4.99) == input_verdict(0.0) == "not"
    assert input_verdict(50.0, measured=False) == "unknown"


def test_input_bound_share_is_the_gpu_idle_wait_share(builder: Any, tmp_path: Path) -> None:
    # same run as test_waits_per_step_and_gpu_idle: idle while waiting 20, 3, 12 µs of 100 µs
    # steps -> mean share (20 + 3 + 12) / 3 = 11.67% -> moderately input-bound
    b = builder.step(0, 100).step(100, 100).step(200, 100)
    b.input_wait(0, 30).input_wait(100, 5).input_wait(200, 10).input_wait(250, 2)
    b.kernel("k", 10, 10).memcpy("HtoD", 100, 2, 64)
    a = analyze_input(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100), (100, 200), (200, 300)))
    assert a.input_bound_pct == pytest.approx(35 / 3)
    assert a.verdict == "moderately"


def test_input_bound_leaves_out_the_start_up_step(builder: Any, tmp_path: Path) -> None:
    # 10 ms steps waiting (GPU idle) 5 ms, 0.1 ms, 0.2 ms: the first is the start-up outlier,
    # so the share is (1% + 2%) / 2 = 1.5% -> not input-bound (with it: 17.7%, moderately)
    b = builder.step(0, 1e4).step(1e4, 1e4).step(2e4, 1e4)
    b.input_wait(0, 5000).input_wait(1e4, 100).input_wait(2e4, 200)
    a = analyze_input(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 1e4), (1e4, 2e4), (2e4, 3e4)))
    assert a.first_step_outlier
    assert a.input_bound_pct == pytest.approx(1.5)
    assert a.verdict == "not"


def test_no_input_waits_is_no_verdict(builder: Any, tmp_path: Path) -> None:
    b = builder.step(0, 100).kernel("k", 10, 10)
    a = analyze_input(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert (a.input_bound_pct, a.verdict) == (0.0, "unknown")


def test_loads_in_process_from_settings_then_wait_names() -> None:
    from stepscope.analysis.input import loads_in_process

    single = ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    multi = ["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"]
    assert loads_in_process({"num_workers": 0}, [])  # record's settings
    assert not loads_in_process({"num_workers": 4}, single)  # the settings win
    assert loads_in_process(None, single) and not loads_in_process(None, multi)
    assert not loads_in_process({"num_workers": False}, multi)  # not a count: the names decide
    assert not loads_in_process(None, ["tf.data iterator GetNext"])  # nothing says: workers


def test_gpt_fixture_loads_in_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = imported("h100/gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    assert analyze_input(rank_graph(run, 0), *marker_windows(run)).in_process is False
