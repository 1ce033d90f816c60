"""How a partition's ending is settled by the launcher's status of its own child; what kind of
source a partition is, and the bundle it becomes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.capture.partitions import Partition, bundle, ended_by, settle_launched, source_kind
from stepscope.capture.staging import PartitionMeta
from stepscope.schema_enums import SourceKind
from stepscope.store.manifest import Diagnostic


def part(pid: int, start: int, ended: str, host: str = "h") -> Partition:
    return Partition(path=Path(f"p{start}-{pid}"),
                     meta=PartitionMeta(pid=pid, start_ns=start, host=host, ended=ended))


def test_ended_by() -> None:
    assert ended_by(0) == "exit" and ended_by(3) == "exit status 3"
    assert ended_by(-15) == "signal: SIGTERM" and ended_by(-200) == "signal: 200"


@pytest.mark.parametrize(("ended", "code", "settled"), [
    ("exit", 3, "exit status 3"),  # raise SystemExit(3): not seen in the process
    ("exit status 3", 0, "exit"),  # a sys.exit(3) the program caught
    ("running", -9, "signal: SIGKILL"),
    ("unknown", 4, "exit status 4"),
    ("exception: ValueError", 1, "exception: ValueError"),  # what the process saw says more
    ("signal: SIGTERM", -15, "signal: SIGTERM"),
])
def test_the_launched_process_takes_the_launchers_status(ended: str, code: int, settled: str) -> None:
    parts = [part(10, 1, ended), part(11, 2, "exit")]
    out = settle_launched(parts, 10, code, "h")
    assert [p.meta.ended for p in out] == [settled, "exit"]


def test_only_the_last_image_of_an_exec_and_only_on_this_host() -> None:
    parts = [part(10, 1, "running"), part(10, 5, "exit"), part(10, 3, "exit", host="other")]
    out = settle_launched(parts, 10, 2, "h")
    assert [p.meta.ended for p in out] == ["running", "exit status 2", "exit"]
    assert settle_launched(parts, 99, 2, "h") == parts  # the child was not a Python program


@pytest.mark.parametrize(("gpu", "kind"), [
    ({"backend": "cupti", "state": "stopped"}, SourceKind.CUPTI),
    ({"backend": "cupti-python", "state": "running"}, SourceKind.CUPTI),  # killed mid-window
    ({"backend": "torch", "state": "stopped"}, SourceKind.TORCH),
    ({"backend": "cupti", "state": "unavailable"}, SourceKind.HOST),
    ({"backend": "none", "state": "off"}, SourceKind.HOST),
    (None, SourceKind.HOST),
])
def test_source_kind(gpu: dict[str, str] | None, kind: SourceKind) -> None:
    settings = {} if gpu is None else {"gpu": gpu}
    assert source_kind(PartitionMeta(pid=1, start_ns=1, settings=settings)) is kind


def test_a_partition_as_a_bundle() -> None:
    meta = PartitionMeta(pid=7, start_ns=1, host="h", world_size=2, ended="signal: SIGTERM",
                         diagnostics=(Diagnostic("warning", "x", "its own"),) * 2)
    kernels = pa.table({"ts_ns": [1], "dur_ns": [1], "name": ["k"]})
    b = bundle(1, Partition(path=Path("p1-7"), meta=meta, tables={"kernels": kernels}))
    assert (b.kind, b.rank.rank, b.rank.pid, b.rank.host, b.rank.world_size) == (
        SourceKind.HOST, 1, 7, "h", 2)
    assert list(b.tables) == ["kernels"] and b.tables["kernels"] is kernels
    # its own said once, then its ending, and the window it left open (no window_end_ns)
    assert [(d.code, d.file) for d in b.diagnostics] == [
        ("x", "rank 1 (pid 7)"), ("process_ended", ""), ("partial_run", "")]


def test_a_captured_rank_with_nccl_kernels_gets_collectives(tmp_path: Path) -> None:
    """A CUPTI capture gives no collectives of its own: the assembler makes them from the
    NCCL kernels (store.produce.collectives), one per kernel, with op, algorithm, protocol."""
    from stepscope.store.manifest import Manifest, SourceInfo
    from stepscope.store.produce.assemble import assemble
    from stepscope.store.run import Run
    from stepscope.store.writer import conform

    meta = PartitionMeta(pid=7, start_ns=1, host="h",
                         settings={"gpu": {"backend": "cupti", "state": "stopped"}})
    names = ["sm90_gemm",
             "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"]
    kernels = conform("kernels", {"rank": [0] * 3, "ts_ns": [10, 20, 40], "dur_ns": [5, 15, 3],
                                  "name": names, "device": [0] * 3, "stream": [7, 13, 13],
                                  "correlation": [1, 2, 3]})
    b = bundle(0, Partition(path=Path("p1-7"), meta=meta, tables={"kernels": kernels}))
    assert b.kind is SourceKind.CUPTI
    run = Run(assemble(tmp_path / "run", [b],
                       lambda facts: Manifest(source=SourceInfo(kind="test"), ranks=())))
    t = run.table("collectives")
    assert [(r["op"], r["ts_ns"], r["dur_ns"], r["stream"], r["correlation"], r["algorithm"],
             r["protocol"], r["dtype"], r["source"]) for r in t.to_pylist()] == [
        ("all_reduce", 20, 15, 13, 2, "RING", "LL", "BFloat16", "kernel_name"),
        ("send_recv", 40, 3, 13, 3, None, None, None, "kernel_name")]
