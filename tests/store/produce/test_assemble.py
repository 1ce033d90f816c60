"""The one run assembler: bundles from any source are written, checked against what their kind
of source must provide, and described by one manifest."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.errors import RunError
from stepscope.schema import CONTRACTS, required_tables
from stepscope.schema_enums import SourceKind
from stepscope.store import Manifest, RankInfo, Run, SourceInfo
from stepscope.store.manifest import Diagnostic
from stepscope.store.produce import RankBundle, assemble
from stepscope.store.produce.bundle import contract_gaps

KERNELS = {"ts_ns": [10, 20], "dur_ns": [5, 7], "name": ["gemm", "relu"], "device": [0, 0]}
DEVICES = {"device": [0], "name": ["NVIDIA H100 80GB HBM3"], "sm_count": [132]}
CALLS = {"ts_ns": [1, 2], "dur_ns": [1, 1], "name": ["cudaLaunchKernel"] * 2}
STREAMS = {"device": [0], "stream": [7]}


def head(facts: Sequence[RankBundle]) -> Manifest:
    return Manifest(source=SourceInfo(kind="test"), ranks=(),
                    diagnostics=(Diagnostic("info", "run_wide", "said once"),))


def bundle(rank: int, kind: SourceKind, **tables: Mapping[str, list[object]]) -> RankBundle:
    return RankBundle(kind=kind, rank=RankInfo(rank=rank, file=f"r{rank}.json"),
                      tables={k: pa.table(v) for k, v in tables.items()},
                      diagnostics=(Diagnostic("info", "own", f"rank {rank}'s own"),))


def test_a_gpu_source_without_devices_is_diagnosed(tmp_path: Path) -> None:
    """The contract's check itself: a CUPTI rank with kernels and no devices table is said, a
    complete one is not (without the check, the run would be silent about the gap)."""
    bundles = [bundle(1, SourceKind.CUPTI, kernels=KERNELS, api_calls=CALLS),
               bundle(0, SourceKind.CUPTI, kernels=KERNELS, api_calls=CALLS, devices=DEVICES)]
    run = Run(assemble(tmp_path / "run", bundles, head))
    assert run.ranks == (0, 1)
    assert [r.rank for r in run.manifest.ranks] == [0, 1]
    diags = run.manifest.diagnostics
    # run-wide first, then each bundle's own in the order given, its gaps after them
    assert [(d.code, d.file) for d in diags] == [
        ("run_wide", ""), ("own", ""), ("missing_tables", "r1.json"), ("own", "")]
    assert diags[2].level == "warning"
    assert diags[2].message == (
        "rank 1 (cupti source) has GPU activity but no devices table, which such a source must "
        "provide: the analyses and rules that need it are skipped")
    assert run.manifest.tables["kernels"] == 4 and run.manifest.tables["devices"] == 1


@pytest.mark.parametrize("kind", list(SourceKind))
def test_each_kind_with_gpu_activity_needs_its_tables(tmp_path: Path, kind: SourceKind) -> None:
    full = {"kernels": KERNELS, "devices": DEVICES, "api_calls": CALLS, "streams": STREAMS,
            "kernel_metrics": {"id": [0], "name": ["k"]}}
    run = Run(assemble(tmp_path / "run", [bundle(0, kind, **full)], head))
    assert "missing_tables" not in [d.code for d in run.manifest.diagnostics]
    for table in required_tables(kind, gpu_activity=True):
        rest = {k: v for k, v in full.items() if k != table}
        out = tmp_path / f"without-{table}"
        diags = Run(assemble(out, [bundle(0, kind, **rest)], head)).manifest.diagnostics
        gaps = [d for d in diags if d.code == "missing_tables"]
        assert len(gaps) == 1 and f"no {table} table" in gaps[0].message


def test_gpu_sources_need_devices_and_host_only_needs_nothing() -> None:
    for kind in (SourceKind.KINETO, SourceKind.CUPTI, SourceKind.TORCH):
        assert "devices" in CONTRACTS[kind].with_gpu
        assert contract_gaps(kind, {"kernels": 3})[0] == "devices"
        assert contract_gaps(kind, {"threads": 3}) == ()  # no GPU activity: no GPU tables owed
    assert contract_gaps(SourceKind.HOST, {"kernels": 3}) == ()
    assert contract_gaps(SourceKind.CUPTI, {"memset": 1, "devices": 1, "api_calls": 0}) == (
        "api_calls",)


def test_a_rank_given_twice_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    bundles = [bundle(0, SourceKind.HOST), bundle(0, SourceKind.HOST)]
    with pytest.raises(RunError, match="rank 0 given twice"):
        assemble(tmp_path / "run", bundles, head)
    assert list(tmp_path.iterdir()) == []


class Lazy(Mapping[str, pa.Table]):
    """Tables read on demand, counting the reads (capture's partitions are read this way)."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def __getitem__(self, name: str) -> pa.Table:
        self.reads.append(name)
        return pa.table(KERNELS if name == "kernels" else DEVICES)

    def __iter__(self) -> Iterator[str]:
        return iter(("kernels", "devices"))

    def __len__(self) -> int:
        return 2


def test_lazy_tables_are_read_once_and_observed(tmp_path: Path) -> None:
    lazy = Lazy()
    seen: list[tuple[int, str, int]] = []
    got: list[Sequence[RankBundle]] = []

    def head_of(facts: Sequence[RankBundle]) -> Manifest:
        got.append(facts)
        return Manifest(source=SourceInfo(kind="test"), ranks=())

    b = RankBundle(kind=SourceKind.HOST, rank=RankInfo(rank=3), tables=lazy)
    run = Run(assemble(tmp_path / "run", [b], head_of,
                       on_table=lambda r, name, t: seen.append((r, name, t.num_rows))))
    assert lazy.reads == ["kernels", "devices"]
    assert seen == [(3, "kernels", 2), (3, "devices", 1)]
    (facts,) = got
    assert [(f.rank.rank, dict(f.tables)) for f in facts] == [(3, {})]  # no tables held
    assert run.table("kernels").column("rank").to_pylist() == [3, 3]
