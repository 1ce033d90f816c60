"""The nsys importer on synthetic exports in the layouts of old and new nsys versions: every
expected value is stated by hand from ``nsys_db``."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from tests.importers.nsys.nsys_db import EPOCH, HOST_PID, RANK0_PID, RANK1_PID, build

from stepscope.importers.nsys import read_nsys
from stepscope.store.produce.bundle import RankBundle


def _read(path: Path, first_rank: int = 0) -> list[RankBundle]:
    return list(read_nsys(path, first_rank=first_rank))


def _col(b: RankBundle, table: str, col: str) -> list[object]:
    t = b.tables[table]
    c = t.column(col)
    return (c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c).to_pylist()


@pytest.fixture(params=[True, False], ids=["new", "old"])
def export(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[bool, Path]:
    return request.param, build(tmp_path / "r.sqlite", new=request.param)


def test_one_rank_per_gpu_process_in_device_order(export: tuple[bool, Path]) -> None:
    _, path = export
    b0, b1 = _read(path, first_rank=4)
    assert (b0.rank.rank, b0.rank.pid, b1.rank.rank, b1.rank.pid) == (4, RANK0_PID, 5, RANK1_PID)
    assert HOST_PID not in (b0.rank.pid, b1.rank.pid)
    assert b0.clock_offset_ns == EPOCH and b0.rank.world_size == 2
    assert _col(b0, "processes", "name") == ["python3"]
    assert _col(b0, "threads", "tid") == [RANK0_PID + 1]
    assert _col(b0, "threads", "name") == ["main thread"]
    assert _col(b1, "kernels", "device") == [1]


def test_kernels_with_launch_configuration_and_unix_times(export: tuple[bool, Path]) -> None:
    _, path = export
    b0 = _read(path)[0]
    assert _col(b0, "kernels", "ts_ns") == [EPOCH + 1000, EPOCH + 11_000, EPOCH + 21_000,
                                            EPOCH + 35_000]
    assert _col(b0, "kernels", "dur_ns") == [2000, 2000, 2000, 1000]
    assert _col(b0, "kernels", "name") == ["kernA", "kernA", "kernA", "kernB"]
    assert _col(b0, "kernels", "correlation") == [100, 101, 102, 5]
    row = b0.tables["kernels"].slice(0, 1).to_pylist()[0]
    assert (row["grid_x"], row["grid_y"], row["grid_z"], row["block_x"]) == (4, 2, 1, 128)
    assert (row["registers"], row["static_smem"], row["dynamic_smem"], row["shared_memory"]) == \
        (32, 512, 1024, 1536)
    assert row["stream"] == 7 and row["rank"] == 0
    diags = {d.code: d for d in b0.diagnostics}
    assert diags["kernels_without_launch"].count == 1  # kernB's launch is not in the file


def test_runtime_and_driver_calls(export: tuple[bool, Path]) -> None:
    _, path = export
    b0, b1 = _read(path)
    assert _col(b0, "api_calls", "name") == ["cudaLaunchKernel", "cuLaunchKernel",
                                             "cudaStreamSynchronize", "cudaLaunchKernel",
                                             "cudaLaunchKernel"]
    assert _col(b0, "api_calls", "domain") == ["runtime", "driver", "runtime", "runtime",
                                               "runtime"]
    assert _col(b0, "api_calls", "kind") == ["launch", "launch", "sync", "launch", "launch"]
    assert set(_col(b0, "api_calls", "pid")) == {RANK0_PID}
    assert set(_col(b0, "api_calls", "tid")) == {RANK0_PID + 1}
    assert _col(b1, "api_calls", "correlation") == [21]


def test_copy_and_memory_kinds_follow_the_enum_tables_else_nsys_numbering(
        export: tuple[bool, Path]) -> None:
    new, path = export
    b0 = _read(path)[0]
    assert _col(b0, "memcpy", "bytes") == [4096, 64]
    if new:  # the export's own ENUM tables: 42 is PtoP, memory kind 0 is pinned here
        assert _col(b0, "memcpy", "kind") == ["HtoD", "PtoP"]
        assert _col(b0, "memcpy", "src_kind") == ["pinned", "device"]
        assert _col(b0, "memcpy", "dst_device") == [None, 1]
    else:  # nsys's numbering: 0 pageable, 2 device; 42 unknown
        assert _col(b0, "memcpy", "kind") == ["HtoD", "unknown"]
        assert _col(b0, "memcpy", "src_kind") == ["pageable", "device"]
        assert _col(b0, "memcpy", "dst_device") == [None, None]
    assert _col(b0, "memcpy", "dst_kind") == ["device", "device"]
    assert _col(b0, "memset", "dst_kind") == ["device"] and _col(b0, "memset", "bytes") == [256]
    assert _col(b0, "sync", "kind") == ["stream"]


def test_nvtx_ranges_nest_and_os_runtime_calls_stay_apart(export: tuple[bool, Path]) -> None:
    _, path = export
    b0 = _read(path)[0]
    rows = {(r["name"], r["ts_ns"] - EPOCH): r for r in
            b0.tables["annotations"].cast(pa.schema([
                f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f
                for f in b0.tables["annotations"].schema])).to_pylist()}
    assert set(rows) == {("train_step", 0), ("train_step", 10_000), ("train_step", 20_000),
                         ("forward", 200), ("async", 500), ("ioctl", 300)}  # no mark, no domain
    step0, fwd, asy, io = (rows[("train_step", 0)], rows[("forward", 200)], rows[("async", 500)],
                           rows[("ioctl", 300)])
    assert (step0["depth"], fwd["depth"], asy["depth"]) == (0, 1, 2)
    assert fwd["parent_id"] == step0["id"] and asy["parent_id"] == fwd["id"]
    assert io["source"] == "os_runtime" and io["depth"] == 0 and io["parent_id"] is None
    assert fwd["source"] == "nvtx" and fwd["dur_ns"] == 4800
    assert b0.details["nvtx_domains"] == {"default": 4, "MyDomain": 1}
    assert b0.details["nvtx_other_events"] == 2


def test_devices_through_the_cuda_device_map_else_cu_device(export: tuple[bool, Path]) -> None:
    new, path = export
    b0, b1 = _read(path)
    d0 = b0.tables["devices"].to_pylist()[0]
    d1 = b1.tables["devices"].to_pylist()[0]
    if new:  # TARGET_INFO_CUDA_DEVICE: process 300's CUDA device 0 is GPU 5
        assert (d0["name"], d1["name"]) == ("Test GPU five", "Test GPU six")
        assert d0["uuid"] == "GPU-abc" and d0["pci_bus_id"] == "0000:ab:00.0"
    else:  # cuDevice
        assert (d0["name"], d1["name"]) == ("Test GPU six", "Test GPU five")
        assert d0["uuid"] == "GPU-def"
    assert (d0["device"], d0["sm_count"], d0["compute_major"], d0["clock_khz"]) == \
        (0, 100, 9, 1_500_000)
    assert d0["max_threads_per_sm"] == 64 * 32 and d0["memory_bandwidth_gbs"] == 2000.0
    assert _col(b0, "streams", "stream") == [7] and _col(b0, "streams", "priority") == [-5]


def test_without_gpu_rows_devices_are_known_by_index(tmp_path: Path) -> None:
    b0, b1 = _read(build(tmp_path / "r.sqlite", gpu_info=False))
    assert b0.tables["devices"].to_pylist()[0]["name"] is None
    assert _col(b1, "devices", "device") == [1]
    assert [d.code for d in b0.diagnostics].count("no_device_properties") == 1
    assert "no_device_properties" not in [d.code for d in b1.diagnostics]  # once per file


def test_tool_and_details_name_the_version_and_layout(export: tuple[bool, Path]) -> None:
    new, path = export
    b0 = _read(path)[0]
    want = "2099.1.0 (sqlite export, schema 3.99.0)" if new else "2022.1 (sqlite export, " \
        "schema 2.9.0)"
    assert b0.tool == f"NVIDIA Nsight Systems {want}"
    assert b0.details["rows"]["kernels"] == 4 and b0.details["os_runtime"] is True


def test_gzip_is_read_through_a_temporary_file_removed_after(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    plain = build(tmp_path / "r.sqlite")
    gz = tmp_path / "r.sqlite.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    it = read_nsys(gz)
    first = next(it)
    assert first.details["compressed"] is True and list(tmp.iterdir())  # open while reading
    rest = list(it)
    assert len(rest) == 1 and not list(tmp.iterdir())
    assert first.tables["kernels"].equals(_read(plain)[0].tables["kernels"])


def test_the_import_releases_each_rank_before_reading_the_next(tmp_path: Path) -> None:
    from stepscope.importers.registry import FORMATS

    path = build(tmp_path / "r.sqlite")
    ranks = FORMATS["nsys"].ranks
    assert ranks is not None
    it = ranks(path, first_rank=0)
    first = next(it)
    assert first.tables["kernels"].num_rows == 4
    second = next(it)
    assert not first.tables and second.tables["kernels"].num_rows == 1
