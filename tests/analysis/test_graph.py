"""The step graph: the correlation join (both directions), op nesting, and that a run's graph
and what is memoised on it are built once (times in the builder are µs; results are ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stepscope.analysis import analyze
from stepscope.analysis.graph import CorrelationIndex, rank_graph, run_graph
from stepscope.analysis.kernels import kernel_table
from stepscope.analysis.summary import summarize
from stepscope.store.run import Run

US = 1000


def test_correlation_index_first_row_and_misses() -> None:
    idx = CorrelationIndex.of(np.array([7, -1, 5, 7, 9], dtype=np.int64))
    # 7 is carried by rows 0 and 3: the first wins; -1 and absent ids pair with nothing
    assert idx.lookup(np.array([7, 5, 9, 8, -1, 100], dtype=np.int64)).tolist() == [
        0, 2, 4, -1, -1, -1]
    assert CorrelationIndex.of(np.zeros(0, dtype=np.int64)).lookup(
        np.array([1], dtype=np.int64)).tolist() == [-1]


def test_api_calls_and_gpu_records_joined_by_correlation(builder: Any, tmp_path: Path) -> None:
    # a kernel launched at 10 µs, a kernel with no launch call, a copy issued at 40 µs
    b = builder.step(0, 100)
    b.kernel("k", 20, 5, launch=(10, 2))
    b.kernel("orphan", 30, 5)
    b.memcpy("HtoD", 50, 4, 1024, api=("cudaMemcpyAsync", 40, 3))
    g = rank_graph(b.build(tmp_path / "r"), 0)
    gpu = g.gpu
    assert (gpu.size, gpu.n_kernels, gpu.n_memcpy) == (3, 2, 1)
    api = g.table("api_calls")
    rows = g.gpu_api_row
    names = api.column("name").to_pylist()
    assert [names[r] if r >= 0 else None for r in rows.tolist()] == [
        "cudaLaunchKernel", None, "cudaMemcpyAsync"]
    # issued: the launching call's start, else the record's own start
    assert g.issued_ns.tolist() == [10 * US, 30 * US, 40 * US]
    # the other direction: each API call's copy record
    assert g.memcpy_row(g.keys("api_calls")).tolist() == [-1, 0]
    by = g.gpu_by_correlation
    assert by.total_ns.tolist() == [5 * US, 5 * US, 4 * US]


def test_correlations_do_not_pair_across_ranks(builder: Any, tmp_path: Path) -> None:
    b = builder.step(0, 100).step(0, 100, rank=1)
    b.kernel("k", 20, 5, correlation=1, rank=0)
    b.api("cudaLaunchKernel", 10, 2, correlation=1, rank=1)  # same id, another rank
    g = rank_graph(b.build(tmp_path / "r"), None)  # every rank's events together
    assert g.gpu_api_row.tolist() == [-1]
    assert g.issued_ns.tolist() == [20 * US]


def test_enclosing_op_by_nesting(builder: Any, tmp_path: Path) -> None:
    b = builder.step(0, 100)
    b.cpu_op("aten::linear", 5, 30).cpu_op("aten::mm", 8, 10)
    b.kernel("k", 40, 5, launch=(10, 2))
    b.kernel("k", 60, 5, launch=(50, 2))  # outside every op
    g = rank_graph(b.build(tmp_path / "r"), 0)
    ops = g.table("cpu_ops").column("name").to_pylist()
    rows = np.arange(g.table("api_calls").num_rows, dtype=np.int64)
    inner = g.enclosing_op("framework", rows)
    outer = g.enclosing_op("framework", rows, innermost=False)
    assert [ops[i] if i >= 0 else None for i in inner.tolist()] == ["aten::mm", None]
    assert [ops[i] if i >= 0 else None for i in outer.tolist()] == ["aten::linear", None]


def test_graph_and_results_are_built_once(builder: Any, tmp_path: Path) -> None:
    b = builder.step(0, 100)
    b.kernel("k", 20, 5, launch=(10, 2))
    run = b.build(tmp_path / "r")
    graph = run_graph(run)
    assert run_graph(run) is graph and rank_graph(run, 0) is graph.rank(0)
    assert run_graph(Run(run.path)) is not graph  # another Run object: its own graph
    a = analyze(run)
    assert a.graph is graph
    assert summarize(a) is summarize(a)  # computed once per analysis
    g = graph.rank(0)
    full = kernel_table(g, window=a.ranks[0].steady_window)
    assert kernel_table(g, window=a.ranks[0].steady_window) is full
    assert kernel_table(g, window=a.ranks[0].steady_window, limit=50) == a.ranks[0].kernels


def test_ranks_share_the_kernel_name_classification(builder: Any, tmp_path: Path) -> None:
    # two ranks with the same kernel: classified once per run, not once per rank
    from stepscope.analysis.kernels import kernel_frame

    for r in (0, 1):
        builder.step(0, 100, rank=r).kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 10, 50, rank=r)
    g = run_graph(builder.build(tmp_path / "run"))
    for r in (0, 1):
        kernel_frame(g.rank(r))
    cache = g.rank(0).shared(("kernel_classes",), dict)
    assert cache is g.rank(1).shared(("kernel_classes",), dict)
    assert list(cache) == ["sm90_xmma_gemm_bf16bf16_bf16f32"]
    assert g.rank(0).memo(("x",), lambda: 1) == 1 and g.rank(1).memo(("x",), lambda: 2) == 2
