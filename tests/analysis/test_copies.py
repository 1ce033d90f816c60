"""Copy analysis on hand-built runs (times in the builder are µs; results are ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import H100, TraceBuilder, imported, marker_windows
from stepscope.analysis.copies import analyze_copies, pageable_at_pinned_ns
from stepscope.analysis.graph import rank_graph
from stepscope.store.run import Run

US = 1000
MIB = 1 << 20


def W(*pairs: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([int(a * US) for a, _ in pairs], dtype=np.int64),
            np.array([int(b * US) for _, b in pairs], dtype=np.int64))


def test_directions_bandwidth_and_kinds(builder: Any, tmp_path: Path) -> None:
    # HtoD pageable 1 MiB in 100 µs (cudaMemcpyAsync: api-async, but host-blocking: pageable)
    # HtoD pinned 2 MiB in 50 µs (cudaMemcpyAsync: async)
    # DtoH pinned 4 B in 2 µs (cudaMemcpy: synchronous, tiny)
    # DtoD 8 MiB in 10 µs, no API call in the trace
    b = builder.step(0, 1000)
    b.memcpy("HtoD", 10, 100, MIB, src="pageable", api=("cudaMemcpyAsync", 5, 110))
    b.memcpy("HtoD", 200, 50, 2 * MIB, src="pinned", api=("cudaMemcpyAsync", 190, 5))
    b.memcpy("DtoH", 300, 2, 4, dst="pinned", api=("cudaMemcpy", 295, 10))
    b.memcpy("DtoD", 400, 10, 8 * MIB)
    a = analyze_copies(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 1000)))
    assert [d.direction for d in a.directions] == ["HtoD", "DtoH", "DtoD", "PtoP", "HtoH"]
    h = a.direction("HtoD")
    # 3 MiB = 3145728 B in 150 µs -> 3145728 / 150000 = 20.97152 GB/s; median of 1 and 2 MiB
    assert (h.count, h.bytes, h.ns) == (2, 3 * MIB, 150_000)
    assert h.bandwidth_gbs == pytest.approx(20.97152)
    assert h.median_bytes == 1.5 * MIB
    assert (h.pageable.count, h.pageable.bytes, h.pageable.ns) == (1, MIB, 100_000)
    assert (h.pinned.count, h.pinned.bytes, h.pinned.ns) == (1, 2 * MIB, 50_000)
    assert (h.api_async, h.host_blocking, h.no_api, h.tiny_count) == (2, 1, 0, 0)
    d = a.direction("DtoH")
    assert (d.count, d.api_async, d.host_blocking, d.tiny_count, d.tiny_ns) == (1, 0, 1, 1, 2000)
    assert (d.pinned.count, d.pageable.count) == (1, 0)
    dd = a.direction("DtoD")
    assert (dd.count, dd.no_api, dd.pageable.count, dd.pinned.count) == (1, 1, 0, 0)
    assert dd.bandwidth_gbs == pytest.approx(8 * MIB / 10_000)
    assert a.direction("PtoP").count == 0 and a.direction("PtoP").bandwidth_gbs == 0.0
    assert (a.count, a.bytes, a.tiny_count) == (4, 11 * MIB + 4, 1)


def test_overlap_with_kernels_of_the_same_device(builder: Any, tmp_path: Path) -> None:
    # device 0: kernels [0,50) on stream 7 and [60,80) on stream 8; HtoD copy [40,70) on
    # stream 9 overlaps [40,50) + [60,70) = 20 µs, exposed 10 µs.
    # device 1: kernel [0,100) covers its DtoH copy [10,20) fully (10 µs overlapped); it does
    # not count for device 0's copy.
    b = builder.step(0, 100)
    b.kernel("a", 0, 50, stream=7).kernel("b", 60, 20, stream=8).kernel("c", 0, 100, device=1)
    b.memcpy("HtoD", 40, 30, 4096, stream=9)
    b.memcpy("DtoH", 10, 10, 4096, device=1, stream=9)
    a = analyze_copies(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100)))
    assert (a.direction("HtoD").overlap_ns, a.direction("HtoD").exposed_ns) == (20_000, 10_000)
    assert (a.direction("DtoH").overlap_ns, a.direction("DtoH").exposed_ns) == (10_000, 0)
    assert a.overlap_ns_per_step == (30_000,) and a.exposed_ns_per_step == (10_000,)


def test_per_step_by_start(builder: Any, tmp_path: Path) -> None:
    # windows [0,100), [100,200): HtoD 1000 B at 90-110 straddles -> step 0 (all 20 µs);
    # DtoH 500 B at 150-155 -> step 1; a DtoD at 300 is outside both: not in any figure
    b = builder.step(0, 100).step(100, 100)
    b.memcpy("HtoD", 90, 20, 1000).memcpy("DtoH", 150, 5, 500).memcpy("DtoD", 300, 1, 8)
    a = analyze_copies(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 100), (100, 200)))
    assert a.count_per_step == (1, 1) and a.ns_per_step == (20_000, 5000)
    assert a.htod_bytes_per_step == (1000, 0) and a.htod_ns_per_step == (20_000, 0)
    assert a.dtoh_bytes_per_step == (0, 500) and a.dtoh_ns_per_step == (0, 5000)
    assert a.mean_htod_bytes_per_step == 500.0 and a.mean_ns_per_step == 12_500.0
    assert a.direction("DtoD").count == 0 and a.count == 2
    # no windows: everything, no per-step figures
    n = analyze_copies(rank_graph(Run(tmp_path / "r"), 0), *W())
    assert n.count == 3 and n.count_per_step == () and n.mean_count_per_step == 0.0


def test_pageable_at_measured_pinned_bandwidth(builder: Any, tmp_path: Path) -> None:
    # pinned HtoD copies of 1e6, 2e6, 3e6 B in 100 µs each -> 10, 20, 30 GB/s, median 20 GB/s;
    # a tiny pinned one (4 B) measures latency and is left out.
    # pageable HtoD 4e6 B in 1000 µs -> 4e6 / 20 = 200000 ns; pageable 100 B in 5 µs is tiny:
    # no saving claimed (5 µs). Total 1005 µs -> 205 µs, saving 800 µs, all in step 0.
    b = builder.step(0, 5000).step(5000, 5000)
    for i, n in enumerate((1_000_000, 2_000_000, 3_000_000)):
        b.memcpy("HtoD", 100 + 200 * i, 100, n, src="pinned")
    b.memcpy("HtoD", 900, 2, 4, src="pinned")
    b.memcpy("HtoD", 1000, 1000, 4_000_000, src="pageable")
    b.memcpy("HtoD", 2500, 5, 100, src="pageable")
    e = pageable_at_pinned_ns(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 5000), (5000, 10000)))
    assert (e.basis, e.pinned_samples) == ("measured_pinned", 3)
    assert e.bandwidth_gbs == pytest.approx(20.0)
    assert (e.pageable_count, e.pageable_ns, e.estimated_ns, e.saving_ns) == (
        2, 1_005_000, 205_000, 800_000)
    assert e.pageable_ns_per_step == (1_005_000, 0) and e.estimated_ns_per_step == (205_000, 0)
    assert e.mean_saving_ns_per_step == 400_000.0


@pytest.mark.parametrize(("major", "basis", "est"), [
    (9, "pcie_gen5", 100_000),  # 5e6 B / 50 GB/s
    (8, "pcie_gen4", 200_000),  # 5e6 B / 25 GB/s
    (7, "pcie_gen3", 416_667),  # 5e6 B / 12 GB/s, rounded up
])
def test_pageable_at_nominal_pcie(tmp_path: Path, major: int, basis: str, est: int) -> None:
    # no pinned copy in the run: the nominal link figure of the device generation is used
    b = TraceBuilder(device={**H100, "compute_major": major})
    b.step(0, 1000).memcpy("DtoH", 10, 500, 5_000_000, dst="pageable")
    e = pageable_at_pinned_ns(rank_graph(b.build(tmp_path / "r"), 0), *W((0, 1000)), "DtoH")
    assert (e.basis, e.pinned_samples, e.estimated_ns) == (basis, 0, est)


def test_empty_run(builder: Any, tmp_path: Path) -> None:
    run = builder.build(tmp_path / "r")
    a = analyze_copies(rank_graph(run, 0), *W((0, 100)))
    assert a.count_per_step == (0,) and a.count == 0 and a.direction("HtoD").bandwidth_gbs == 0.0
    e = pageable_at_pinned_ns(rank_graph(run, 0), *W((0, 100)))
    assert (e.pageable_count, e.saving_ns, e.basis) == (0, 0, "pcie_gen5")


# -- real traces --------------------------------------------------------------------------






def test_cnn_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: 6 pageable H2D copies, 3 D2H copies to pinned memory (2 + 1 per step)
    run = imported("h100/cnn_fp32_sync.pt.trace.json.gz", tmp_path_factory)
    ws, we = marker_windows(run)
    a = analyze_copies(rank_graph(run, 0), ws, we)
    h, d = a.direction("HtoD"), a.direction("DtoH")
    assert (h.count, h.pageable.count, h.pinned.count, h.host_blocking) == (6, 6, 0, 6)
    assert (d.count, d.pinned.count, d.pageable.count, d.host_blocking) == (3, 3, 0, 0)
    assert a.count_per_step == (3, 3, 3)
    e = pageable_at_pinned_ns(rank_graph(run, 0), ws, we)
    assert e.basis == "pcie_gen5" and e.pageable_count == 6  # no pinned H2D copy to measure
    assert 0 < e.estimated_ns < e.pageable_ns


def test_gpt_fixture(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: 3 pinned H2D copies, 54 D2D
    run = imported("h100/gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    a = analyze_copies(rank_graph(run, 0), *marker_windows(run))
    h = a.direction("HtoD")
    assert (h.count, h.pinned.count, h.pageable.count) == (3, 3, 0)
    assert a.direction("DtoD").count == 54


def test_alexnet_fixture_without_steps(tmp_path_factory: pytest.TempPathFactory) -> None:
    # fixtures/README: 16 pageable H2D copies and no ProfilerStep: no windows -> whole trace
    run = imported("hta/critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
                    tmp_path_factory)
    a = analyze_copies(rank_graph(run, 0), *W())
    h = a.direction("HtoD")
    assert (h.count, h.pageable.count) == (16, 16)
