"""The XSpace importer on hand-made files: every table's rows computed by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from importers.xspace.make import Plane, Ref, build, write
from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers import detect
from stepscope.importers.xspace.parse import parse_xspace
from stepscope.importers.xspace.wire import looks_like_xspace
from stepscope.schema_enums import SourceKind

START = 1_700_000_000_000_000_000  # Task Environment's profile_start_time (Unix ns)
LINE_NS = 1000  # every line's timestamp_ns: events start at START + 1000 ns + offset


def jax_planes(*, start: int | None = START, line_ns: int = LINE_NS) -> list[Plane]:
    meta = Plane("/host:metadata", {"jax_version": "0.4.30", "process_id": 42})
    host = Plane("/host:CPU")
    t = host.line(42, "python3", line_ns)
    t.event("train", 0, 10_000_000, step_num=0, _r=1)
    t.event("train", 20_000_000, 10_000_000, step_num=1, _r=1)
    t.event("$train.py:10 loop", 1_000_000, 2_000_000)
    t.event("PjitFunction(step)", 3_000_000, 4_000_000)
    t.event("ThunkExecutor", 3_500_000, 1_000_000)
    t.event("MemoryAllocation", 3_600_000, 0, bytes_allocated=64)
    t.event("gemm_k", 4_000_000, 1_000_000, correlation_id=7, device_id=0)  # XLA: launch
    t.event("cuGraphLaunch (CudaGraph:3)", 5_000_000, 500_000, correlation_id=8)
    t.event("cuMemcpyHtoDAsync", 5_500_000, 300_000, correlation_id=9)
    # a launch a CUDA graph captured (no kernel of its own), a TF-style copy named by its kind
    t.event("captured_k", 5_900_000, 100_000, correlation_id=99, device_id=0)
    t.event("MemcpyD2H", 5_950_000, 10_000, correlation_id=98)
    # the host waiting for the device: jax.block_until_ready (an array's inside the pytree's)
    t.event("$api.py:3154 block_until_ready", 30_000_000, 2_000_000)
    t.event("$array.py:600 block_until_ready", 30_100_000, 1_800_000)
    t.event("cuLaunchHostFunc", 31_000_000, 50_000)  # XLA's TraceMe named after the call
    gpu = Plane("/device:GPU:0", {"gpu_device_name": "Test GPU", "core_count": 100,
                                  "clock_rate": 1_500_000, "memory_size": 80_000_000_000,
                                  "memory_bandwidth": 2_000_000_000_000,
                                  "compute_cap_major": 9, "compute_cap_minor": 0,
                                  "device_vendor": "Nvidia"})
    s = gpu.line(14, "Stream #14(Compute)", line_ns)
    s.event("gemm_k", 6_000_000, 2_500_000, correlation_id=7, hlo_op="dot.1",
            hlo_module="jit_step", kernel_details=Ref(
                "regs:32 static_shared:1024 dynamic_shared:2048 grid:8,4,1 block:256,1,1 "
                "occ_pct:50"))
    s.event("fusion_a", 9_000_000, 1_000_000, correlation_id=8, hlo_op="fusion",
            hlo_module="jit_step", cuda_graph_id=3)
    s.event("fusion_b", 10_000_000, 1_000_000, correlation_id=8, hlo_op="fusion",
            hlo_module="jit_step", cuda_graph_id=3)
    s.event("Memset", 12_000_000, 500_000, memset_details="size:64")
    c = gpu.line(15, "Stream #15(MemcpyH2D)", line_ns)
    c.event("MemcpyH2D", 7_000_000, 1_000_000, correlation_id=9,
            memcpy_details="kind:HtoD size:4096 dest:0 async:1")
    o = gpu.line(16, "Stream #16(MemcpyOther)", line_ns)
    o.event("CopyDeviceToDevice", 13_000_000, 2_000_000,
            memcpy_details=Ref("kind:Unknown size:655360 dest:0 async:1"))
    o.event("MemcpyP2P", 16_000_000, 1_000_000, memcpy_details="size:8 dest:1 async:1")
    unused = Plane("/device:GPU:1", {"core_count": 100})
    planes = [meta, host, gpu, unused]
    if start is not None:
        planes.append(Plane("Task Environment", {"profile_start_time": start}))
    return planes


def at(offset_ps: int, start: int = START) -> int:
    return start + LINE_NS + offset_ps // 1000


def test_tables_of_a_jax_profile(tmp_path: Path) -> None:
    path = write(tmp_path / "h.xplane.pb", jax_planes())
    assert detect(path) == "xspace"
    b = parse_xspace(path, default_rank=3)
    assert b.kind is SourceKind.XSPACE and b.rank.rank == 3 and b.rank.pid == 42
    assert b.clock_offset_ns == START and b.details["framework"] == "jax"
    assert b.tool.startswith("JAX profiler (XSpace), JAX 0.4.30")
    k = b.tables["kernels"].to_pylist()
    assert [r["name"] for r in k] == ["gemm_k", "fusion_a", "fusion_b"]
    g = k[0]
    assert (g["ts_ns"], g["dur_ns"], g["device"], g["stream"], g["correlation"]) == \
        (at(6_000_000), 2500, 0, 14, 7)
    assert (g["grid_x"], g["grid_y"], g["grid_z"], g["block_x"], g["block_y"], g["block_z"]) \
        == (8, 4, 1, 256, 1, 1)
    assert (g["registers"], g["static_smem"], g["dynamic_smem"], g["shared_memory"]) == \
        (32, 1024, 2048, 3072)
    assert g["source_occupancy_pct"] == 50.0 and g["graph_id"] is None
    assert k[1]["graph_id"] == 3 and k[1]["registers"] is None
    m = b.tables["memcpy"].to_pylist()
    assert [(r["kind"], r["bytes"], r["dst_device"], r["dur_ns"]) for r in m] == [
        ("HtoD", 4096, None, 1000), ("DtoD", 655360, None, 2000), ("PtoP", 8, 1, 1000)]
    assert b.tables["memset"].to_pylist()[0]["bytes"] == 64
    api = b.tables["api_calls"].to_pylist()
    assert [(r["name"], r["kind"], r["domain"], r["correlation"]) for r in api] == [
        ("cuLaunchKernel", "launch", "driver", 7), ("cuGraphLaunch", "graph_launch", "driver", 8),
        ("cuMemcpyHtoDAsync", "memcpy", "driver", 9), ("cuLaunchKernel", "launch", "driver", 99),
        ("cuMemcpyAsync", "memcpy", "driver", 98),
        ("jax.block_until_ready", "sync", "runtime", None),  # the outer wait only
        ("cuLaunchHostFunc", "launch", "driver", None)]
    wait = next(r for r in api if r["kind"] == "sync")
    assert (wait["ts_ns"], wait["dur_ns"]) == (at(30_000_000), 2000)
    steps = b.tables["steps"].to_pylist()
    assert [(r["step"], r["ts_ns"], r["dur_ns"], r["source"], r["name"]) for r in steps] == [
        (0, at(0), 10_000, "annotation", "train"), (1, at(20_000_000), 10_000, "annotation",
                                                    "train")]
    ops = b.tables["cpu_ops"].to_pylist()
    assert [(r["name"], r["kind"]) for r in ops] == [
        ("train.py:10 loop", "python"), ("PjitFunction(step)", "framework"),
        ("api.py:3154 block_until_ready", "python"), ("array.py:600 block_until_ready", "python")]
    ann = b.tables["annotations"].to_pylist()
    got = sorted((r["name"], r["source"], r["dur_ns"], r["stream"]) for r in ann)
    # the two hlo_op "fusion" kernels in a row are one range [9, 11) µs on stream 14; the three
    # kernels of module jit_step one range [6, 11) µs, the ops inside it
    assert got == [("ThunkExecutor", "user", 1000, None), ("dot.1", "gpu_user", 2500, 14),
                   ("fusion", "gpu_user", 2000, 14), ("jit_step", "gpu_user", 5000, 14),
                   ("train", "user", 10_000, None), ("train", "user", 10_000, None)]
    module = next(r for r in ann if r["name"] == "jit_step")
    assert all(r["parent_id"] == module["id"] and r["depth"] == 1 and r["device"] == 0
               for r in ann if r["name"] in ("dot.1", "fusion"))
    thunk = next(r for r in ann if r["name"] == "ThunkExecutor")
    first_train = next(r for r in ann if r["name"] == "train" and r["ts_ns"] == at(0))
    assert thunk["parent_id"] == first_train["id"] and thunk["depth"] == 1
    dev = b.tables["devices"].to_pylist()
    assert len(dev) == 1  # GPU 1 ran nothing
    d = dev[0]
    assert (d["device"], d["name"], d["vendor"], d["sm_count"], d["clock_khz"],
            d["compute_major"], d["total_memory"], d["memory_bandwidth_gbs"], d["warp_size"]) \
        == (0, "Test GPU", "nvidia", 100, 1_500_000, 9, 80_000_000_000, 2000.0, 32)
    assert sorted(r["stream"] for r in b.tables["streams"].to_pylist()) == [14, 15, 16]
    assert b.tables["threads"].to_pylist()[0]["tid"] == 42
    assert b.rank.host == "host"  # XSpace.hostnames
    assert [(r["pid"], r["host"]) for r in b.tables["processes"].to_pylist()] == [(42, "host")]


def test_absolute_times_are_not_shifted(tmp_path: Path) -> None:
    # lines already on the Unix clock: Task Environment's start is not added again
    b = parse_xspace(write(tmp_path / "a.xplane.pb", jax_planes(line_ns=START + LINE_NS)),
                     default_rank=0)
    assert b.clock_offset_ns == 0
    assert b.tables["kernels"].column("ts_ns")[0].as_py() == at(6_000_000)
    # no Task Environment: the profile's own relative clock
    b = parse_xspace(write(tmp_path / "r.xplane.pb", jax_planes(start=None)), default_rank=0)
    assert b.clock_offset_ns == 0
    assert b.tables["kernels"].column("ts_ns")[0].as_py() == at(6_000_000, start=0)


def test_gzip_gives_the_same_tables(tmp_path: Path) -> None:
    data = build(jax_planes())
    plain = tmp_path / "h.xplane.pb"
    plain.write_bytes(data)
    packed = tmp_path / "h.xplane.pb.gz"
    packed.write_bytes(gzip.compress(data))
    assert detect(packed) == "xspace"
    a, b = parse_xspace(plain, default_rank=0), parse_xspace(packed, default_rank=0)
    for name, t in a.tables.items():
        assert b.tables[name].equals(t), name


def test_tensorflow_steps_line_and_input_waits(tmp_path: Path) -> None:
    host = Plane("/host:CPU")
    t = host.line(7, "tf_Compute/7")
    t.event("IteratorGetNextOp::DoCompute", 0, 3_000_000)
    t.event("MatMul:MatMul", 4_000_000, 1_000_000, is_eager=0)
    gpu = Plane("/device:GPU:0", {"core_count": 80})
    gpu.line(3, "Stream #3(Compute)").event("volta_sgemm", 5_000_000, 2_000_000)
    gpu.line(-559038737, "Steps").event("0", 0, 9_000_000, step_name="0")
    gpu.line(-559038734, "TensorFlow Ops").event("dense/MatMul", 5_000_000, 2_000_000)
    b = parse_xspace(write(tmp_path / "tf.xplane.pb", [host, gpu]), default_rank=0)
    assert b.details["framework"] == "tensorflow" and b.tool.startswith("TensorFlow Profiler")
    assert b.tables["steps"].to_pylist()[0]["dur_ns"] == 9000
    w = b.tables["input_waits"].to_pylist()
    assert [(r["name"], r["dur_ns"], r["source"]) for r in w] == [
        ("IteratorGetNextOp::DoCompute", 3000, "tf_data")]
    assert b.tables["cpu_ops"].to_pylist()[0]["name"] == "MatMul:MatMul"
    ann = b.tables["annotations"].to_pylist()
    # the derived TensorFlow Ops line is the GPU op ranges (no hlo_op runs made besides)
    assert [(r["name"], r["source"]) for r in ann if r["source"] == "gpu_user"] == [
        ("dense/MatMul", "gpu_user")]


def test_a_tpu_profile_is_refused_in_one_line(tmp_path: Path) -> None:
    tpu = Plane("/device:TPU:0")
    tpu.line(1, "XLA Ops").event("fusion.1", 0, 1000)
    path = write(tmp_path / "tpu.xplane.pb", [Plane("/host:CPU"), tpu])
    with pytest.raises(TraceFormatError, match=r"a TPU profile \(1 /device:TPU planes\)"):
        parse_xspace(path, default_rank=0)


def test_damaged_and_foreign_files(tmp_path: Path) -> None:
    data = build(jax_planes())
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedFileError, match="truncated XSpace file"):
        parse_xspace(cut, default_rank=0)
    junk = tmp_path / "junk.xplane.pb"
    junk.write_bytes(b"\x00\x01binary junk")
    with pytest.raises(TraceFormatError, match="not an XSpace profile"):
        detect(junk)
    bad = tmp_path / "bad.xplane.pb"  # a plane field whose content is not an XPlane
    bad.write_bytes(b"\x0a\x05\x12\x03/ho" + b"\x0a\x03\xff\xff\xff")
    with pytest.raises(DamagedFileError, match="plane 2 is not a valid XPlane"):
        parse_xspace(bad, default_rank=0)
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"\x22\x04host")  # host names only
    assert detect(empty) == "xspace"
    with pytest.raises(TraceFormatError, match="no planes"):
        parse_xspace(empty, default_rank=0)


def test_signature() -> None:
    assert looks_like_xspace(build(jax_planes()))
    assert looks_like_xspace(build([Plane("/device:GPU:0")]))
    assert not looks_like_xspace(b'{"traceEvents": []}')
    assert not looks_like_xspace(b"\n\n{}")  # JSON after blank lines
    assert not looks_like_xspace(b"")


def test_without_protobuf_the_import_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_protobuf(name: str, *args: object, **kw: object) -> object:
        if name.startswith("google.protobuf") or name == "google":
            raise ImportError("No module named 'google'")
        return real_import(name, *args, **kw)  # type: ignore[arg-type]

    from stepscope.importers.xspace import proto
    proto._classes.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_protobuf)
    try:
        path = tmp_path / "h.xplane.pb"
        path.write_bytes(b"\x0a\x0b\x12\x09/host:CPU")
        with pytest.raises(TraceFormatError, match=r"pip install 'stepscope\[xspace\]'"):
            parse_xspace(path, default_rank=0)
    finally:
        monkeypatch.undo()
        proto._classes.cache_clear()
