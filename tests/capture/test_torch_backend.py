"""``--backend torch``: the exported trace is read at the merge, by the reader the caller gives."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from stepscope.capture.partitions import merge
from stepscope.capture.staging import PartitionMeta, StagingPartition
from stepscope.importers import parse_kineto
from stepscope.store.run import Run

TRACE = Path(__file__).parent.parent / "data" / "cnn_fp32_sync.pt.trace.json.gz"


def staged(tmp_path: Path, text: bytes, settings: dict[str, Any] | None = None) -> Path:
    """A partition as a ``--backend torch`` process leaves it: its trace exported, its meta."""
    part = StagingPartition(tmp_path / "staging" / "p1-1")
    (part.path / "kineto.abc.json").write_bytes(text)
    part.write_meta(PartitionMeta(pid=1, start_ns=1, ended="exit", settings={
        "gpu": {"backend": "torch", "state": "stopped"}, **(settings or {})}))
    return tmp_path / "staging"


def test_the_trace_is_read_at_the_merge_and_clipped_to_the_window(tmp_path: Path) -> None:
    whole = parse_kineto(TRACE, default_rank=0).tables["kernels"]
    ts = sorted(whole.column("ts_ns").to_pylist())
    lo, hi = ts[len(ts) // 4], ts[3 * len(ts) // 4]
    staging = staged(tmp_path, gzip.decompress(TRACE.read_bytes()),
                     {"window_start_ns": lo, "window_end_ns": hi})
    run = Run(merge(staging, tmp_path / "run", command=["x.py"], returncode=0,
                    read_trace=parse_kineto))
    kernels = run.table("kernels")
    mids = [t + d // 2 for t, d in zip(kernels.column("ts_ns").to_pylist(),
                                       kernels.column("dur_ns").to_pylist())]
    assert 0 < kernels.num_rows < whole.num_rows and all(lo <= m <= hi for m in mids)
    gpu = run.manifest.settings["ranks"]["rank0"]["gpu"]
    assert gpu["decoded"] == "at merge" and gpu["events"] > 0
    assert run.table("processes").num_rows == 0  # the host capture's own, not the trace's
    assert not list((staging / "p1-1").glob("kineto.*"))  # read, then removed


def test_without_a_reader_the_trace_is_not_read_and_it_is_said(tmp_path: Path) -> None:
    staging = staged(tmp_path, gzip.decompress(TRACE.read_bytes()))
    run = Run(merge(staging, tmp_path / "run", command=["x.py"], returncode=0))
    assert run.table("kernels").num_rows == 0
    codes = {d.code: d.level for d in run.manifest.diagnostics}
    assert codes["torch_trace_not_read"] == "error"


def test_a_trace_cut_short_costs_its_records_only(tmp_path: Path) -> None:
    staging = staged(tmp_path, gzip.decompress(TRACE.read_bytes())[:5000])
    run = Run(merge(staging, tmp_path / "run", command=["x.py"], returncode=0,
                    read_trace=parse_kineto))
    assert run.table("kernels").num_rows == 0
    (diag,) = [d for d in run.manifest.diagnostics if d.code == "torch_trace_unreadable"]
    assert diag.level == "error" and diag.file == "rank 0 (pid 1)"


def test_kinetos_row_fills_in_for_a_used_gpu_the_driver_did_not_describe(tmp_path: Path) -> None:
    """The driver described GPU 3 (an active context); the trace's kernels ran on GPU 0, which
    only Kineto describes: both rows, by device; Kineto's other GPUs are not listed."""
    staging = staged(tmp_path, gzip.decompress(TRACE.read_bytes()))
    StagingPartition(staging / "p1-1").write_chunk(
        {"devices": {"device": [3], "name": ["driver's GPU"], "sm_count": [132]}})
    run = Run(merge(staging, tmp_path / "run", command=["x.py"], returncode=0,
                    read_trace=parse_kineto))
    rows = run.table("devices").to_pylist()
    assert [(r["device"], r["name"]) for r in rows] == [(0, "NVIDIA H100 80GB HBM3"),
                                                        (3, "driver's GPU")]
    assert set(run.table("kernels").column("device").to_pylist()) == {0}


def test_the_traces_collectives_reach_the_run_with_their_kernels(tmp_path: Path) -> None:
    """torch.profiler's record_param_comms / NCCL kernel args pass the merge and are linked to
    their kernels by the assembler (store.produce.collectives)."""
    nccl = TRACE.parent / "nccl_parser_config_nccl_data.json.gz"
    staging = staged(tmp_path, gzip.decompress(nccl.read_bytes()))
    run = Run(merge(staging, tmp_path / "run", command=["x.py"], returncode=0,
                    read_trace=parse_kineto))
    t = run.table("collectives")
    assert t.num_rows == 21 and set(t.column("source").to_pylist()) == {"kernel_args"}
    assert set(t.column("kernels").to_pylist()) == {1}
    r = next(r for r in t.to_pylist() if r["external_id"] == 12945)
    assert (r["op"], r["bytes"], r["correlation"], r["dur_ns"]) == (
        "all_reduce", 6637568 * 4, 60047, 2636669)
