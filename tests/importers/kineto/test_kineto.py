"""The Kineto importer on real traces (tests/data, see PROVENANCE.md) and small synthetic ones.

Expected counts come from ../shared/fixtures/README.md (computed independently of
stepscope) or, where the README has none, from the trace itself (said so inline).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stepscope.errors import TraceFormatError
from stepscope.importers import detect, import_traces
from stepscope.importers.kineto import parse_kineto
from stepscope.store import Run

DATA = Path(__file__).parents[2] / "data"
GPT = DATA / "gpt_bf16_adamw.pt.trace.json.gz"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"
RANK0 = DATA / "trace_filter_sampled_rank-0.json.gz"
RANK1 = DATA / "trace_filter_sampled_rank-1.json.gz"
NCCL = DATA / "nccl_parser_config_nccl_data.json.gz"
ALEXNET = DATA / "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
EVENT_SYNC = DATA / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
AMD = DATA / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CPU_ONLY = DATA / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
TRITON = DATA / "triton_example_triton_example.json.gz"
JAX = DATA / "jax_mlp.trace.json.gz"
KINETO_FILES = [GPT, CNN, RANK0, RANK1, NCCL, ALEXNET, EVENT_SYNC, AMD, CPU_ONLY, TRITON]


def rows(t: pa.Table, **where: Any) -> int:
    """Rows of ``t`` whose columns equal the given values."""
    mask = None
    for col, value in where.items():
        arr = t.column(col)
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        m = pc.equal(arr, value)
        mask = m if mask is None else pc.and_(mask, m)
    return t.num_rows if mask is None else int(pc.sum(mask).as_py() or 0)


def count(kf: Any, table: str, **where: Any) -> int:
    t = kf.tables.get(table)
    return 0 if t is None else rows(t, **where)


@pytest.fixture(scope="module")
def gpt() -> Any:
    return parse_kineto(GPT, default_rank=0)


@pytest.mark.parametrize("path", KINETO_FILES, ids=lambda p: p.name[:28])
def test_every_kineto_fixture_is_detected_and_imports(path: Path) -> None:
    assert detect(path) == "kineto"
    kf = parse_kineto(path, default_rank=0)
    assert [d for d in kf.diagnostics if d.level != "info"] == []
    for name, t in kf.tables.items():
        assert t.num_rows > 0, name
        if "ts_ns" in t.column_names:
            assert t.column("ts_ns").null_count == 0
            assert pc.min(t.column("ts_ns")).as_py() > 1_600_000_000 * 10**9  # Unix ns, >= 2020
        if "dur_ns" in t.column_names:
            assert pc.min(t.column("dur_ns")).as_py() >= 0


def test_gpt_counts_match_the_fixture_readme(gpt: Any) -> None:
    assert count(gpt, "kernels") == 1311
    assert count(gpt, "memcpy", kind="HtoD", src_kind="pinned", dst_kind="device") == 3
    assert count(gpt, "memcpy", kind="DtoD") == 54
    assert count(gpt, "steps", source="profiler_step") == 3
    assert gpt.tables["steps"].column("step").to_pylist() == [3, 4, 5]
    # the three DataLoader __next__ ranges, host side only
    assert count(gpt, "input_waits", source="dataloader") == 3
    # with_stack: python_function events are python cpu_ops
    assert count(gpt, "cpu_ops", kind="python") == 6720
    assert count(gpt, "memory_events", device_type="gpu") > 0
    assert gpt.tool == "PyTorch profiler (Kineto), CUPTI 130001, CUDA runtime 13000"
    assert gpt.details["with_stack"] is True and gpt.details["profile_memory"] is True


def test_timestamps_are_exact_unix_nanoseconds(gpt: Any) -> None:
    # ProfilerStep#3: "ts": 4453852714239.34, "dur": 34093.562;
    # "baseTimeNanoseconds": 1790857026000000000
    first = gpt.tables["steps"].slice(0, 1).to_pylist()[0]
    assert first["name"] == "ProfilerStep#3"
    assert first["ts_ns"] == 1_790_857_026_000_000_000 + 4_453_852_714_239_340
    assert first["dur_ns"] == 34_093_562
    assert gpt.clock_offset_ns == 1_790_857_026_000_000_000
    # no baseTimeNanoseconds: integer epoch microseconds ("ts": 1682725898081597)
    kf = parse_kineto(RANK0, default_rank=0)
    assert kf.clock_offset_ns == 0
    assert kf.tables["cpu_ops"].column("ts_ns")[0].as_py() == 1_682_725_898_081_597_000


def test_h100_device_row(gpt: Any) -> None:
    (dev,) = gpt.tables["devices"].to_pylist()
    assert dev["name"] == "NVIDIA H100 80GB HBM3" and dev["vendor"] == "nvidia"
    assert (dev["compute_major"], dev["compute_minor"], dev["sm_count"]) == (9, 0, 132)
    assert dev["smem_per_block_optin"] == 232448
    assert dev["smem_per_sm"] == 233472 and dev["warp_size"] == 32
    assert dev["max_blocks_per_sm"] is None  # analysis fills it from the compute capability


def test_kernel_columns(gpt: Any) -> None:
    k = gpt.tables["kernels"].slice(1, 1).to_pylist()[0]  # vectorized_gather_kernel, in file order
    assert k["name"].startswith("void at::native::vectorized_gather_kernel")
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"]) == (8192, 1, 1, 192)
    assert (k["registers"], k["shared_memory"], k["source_occupancy_pct"]) == (32, 0, 94.0)
    assert (k["device"], k["stream"], k["correlation"], k["external_id"]) == (0, 7, 18202, 22)
    assert k["queued_ns"] is None  # Kineto wrote "queued": 0 (not collected)
    streams = gpt.tables["streams"].to_pylist()
    assert [(s["device"], s["stream"], s["name"]) for s in streams] == [(0, 7, "stream 7")]


def test_api_calls_are_classified(gpt: Any) -> None:
    t = gpt.tables["api_calls"]
    assert count(gpt, "api_calls", domain="driver") == 297  # cuLaunchKernelEx
    assert count(gpt, "api_calls", domain="driver", kind="launch") == 297
    assert count(gpt, "api_calls", name="cudaMemcpyAsync", kind="memcpy") == 57
    assert t.column("cbid").null_count == 0


def test_cnn_copies_and_sync_time() -> None:
    kf = parse_kineto(CNN, default_rank=0)
    assert count(kf, "kernels") == 288
    assert count(kf, "memcpy", kind="HtoD", src_kind="pageable", dst_kind="device") == 6
    assert count(kf, "memcpy", kind="DtoH", src_kind="device", dst_kind="pinned") == 3
    api = kf.tables["api_calls"]
    sync = pc.filter(api.column("dur_ns"), pc.equal(api.column("name").cast(pa.string()),
                                                    "cudaStreamSynchronize"))
    assert pc.sum(sync).as_py() / 1e6 == pytest.approx(22.0, abs=0.05)  # README: 22.0 ms


def test_two_ranks_import_as_one_run(tmp_path: Path) -> None:
    out = import_traces([RANK1, RANK0], tmp_path / "run")
    run = Run(out)
    assert run.ranks == (0, 1)  # from distributedInfo, not from the order given
    per_rank = run.query("select rank, count(*) as n from kernels group by rank order by rank")
    assert per_rank.to_pylist() == [{"rank": 0, "n": 1154}, {"rank": 1, "n": 1104}]
    assert run.query("select count(*) as n from kernels").column("n")[0].as_py() == 2258
    m = run.manifest
    assert m.source.kind == "kineto" and m.clock == "unix_ns" and m.clock_offset_ns == 0
    ranks = [(r.rank, r.world_size, r.backend) for r in m.ranks]
    assert ranks == [(0, 128, "nccl"), (1, 128, "nccl")]
    assert m.tables["kernels"] == 2258
    assert sorted(tmp_path.iterdir()) == [out]  # nothing else left behind


def test_folder_import_and_same_rank_twice(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for src in (RANK0, RANK1):
        (folder / src.name).write_bytes(src.read_bytes())
    (folder / "config.json").write_text('{"lr": 0.1}')  # not a trace: skipped, with a note
    out = import_traces([folder], tmp_path / "run")
    run = Run(out)
    assert run.ranks == (0, 1)
    # these traces have no deviceProperties: each rank's missing devices table is said
    diags = run.manifest.diagnostics
    assert [d.code for d in diags] == ["skipped_file", "missing_tables", "missing_tables"]
    assert [(d.file, d.level) for d in diags[1:]] == [
        (str(folder / RANK0.name), "warning"), (str(folder / RANK1.name), "warning")]
    assert diags[1].message.startswith("rank 0 (kineto source) has GPU activity but no devices "
                                       "table")
    copy = tmp_path / "again.json.gz"
    copy.write_bytes(RANK0.read_bytes())
    with pytest.raises(TraceFormatError) as err:
        import_traces([RANK0, copy], tmp_path / "run2")
    msg = str(err.value)
    assert "\n" not in msg and str(copy) in msg and str(RANK0) in msg and "rank 0" in msg
    assert not (tmp_path / "run2").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.json.gz", "run", "traces"]


def test_nccl_rank() -> None:
    kf = parse_kineto(NCCL, default_rank=7)
    assert count(kf, "kernels") == 2700
    assert count(kf, "memcpy", kind="DtoD") == 960
    assert count(kf, "steps") == 3
    assert (kf.rank.rank, kf.rank.world_size, kf.rank.backend) == (0, 2, "nccl")
    assert set(kf.tables["kernels"].column("rank").to_pylist()) == {0}  # not default_rank


def test_alexnet_has_syncs_and_no_steps() -> None:
    kf = parse_kineto(ALEXNET, default_rank=0)
    assert count(kf, "kernels") == 79
    assert count(kf, "memcpy", kind="HtoD", src_kind="pageable") == 16
    assert "steps" not in kf.tables  # no ProfilerStep ranges: analysis falls back
    assert count(kf, "sync") == 41
    assert count(kf, "sync", kind="stream") == 16
    assert count(kf, "sync", kind="context") == 5
    assert count(kf, "sync", kind="stream_wait_event") == 20


def test_event_syncs() -> None:
    kf = parse_kineto(EVENT_SYNC, default_rank=0)
    assert count(kf, "kernels") == 3
    syncs = kf.tables["sync"].to_pylist()
    event = [s for s in syncs if s["kind"] == "event"]
    assert len(event) == 3
    assert all(s["event_id"] == 9 and s["stream"] is None for s in event)  # stream -1 -> null
    (ctx,) = [s for s in syncs if s["kind"] == "context"]
    assert ctx["event_id"] is None


def test_amd_trace() -> None:
    kf = parse_kineto(AMD, default_rank=0)
    assert count(kf, "kernels") == 14
    assert count(kf, "steps") == 2
    assert set(kf.tables["devices"].column("vendor").to_pylist()) == {"amd"}
    # "Memcpy HtoD (Host -> Device)": AMD does not say pageable or pinned
    assert count(kf, "memcpy", kind="HtoD", src_kind="unknown", dst_kind="device") == 2
    assert count(kf, "api_calls", name="hipLaunchKernel", kind="launch") > 0
    assert kf.tool == "PyTorch profiler (Kineto), ROCm"


def test_cpu_only_and_triton() -> None:
    kf = parse_kineto(CPU_ONLY, default_rank=0)
    assert "kernels" not in kf.tables
    # The README says 1 step: the file has one ProfilerStep#551 range, so it comes from the trace.
    assert kf.tables["steps"].column("name").to_pylist() == ["ProfilerStep#551"]
    assert (kf.rank.rank, kf.rank.world_size, kf.rank.backend) == (34, 300, "gloo")
    kf = parse_kineto(TRITON, default_rank=0)
    assert count(kf, "kernels") == 1
    assert count(kf, "api_calls", name="cuLaunchKernel", domain="driver") == 1


def test_jax_trace_event_file_is_refused_with_a_pointer_to_xspace() -> None:
    for call in (lambda: detect(JAX), lambda: parse_kineto(JAX, default_rank=0)):
        with pytest.raises(TraceFormatError) as err:
            call()
        assert "JAX" in str(err.value) and "xplane" in str(err.value)
        assert str(JAX) in str(err.value)


def test_chunked_decode_gives_the_same_tables(tmp_path: Path) -> None:
    # tiny chunks force many boundaries (including the head/tail reassembly)
    for path in (GPT, ALEXNET):
        whole = parse_kineto(path, default_rank=0, chunk_bytes=1 << 30)
        chunked = parse_kineto(path, default_rank=0, chunk_bytes=1 << 14)
        assert whole.tables.keys() == chunked.tables.keys()
        for name in whole.tables:
            assert whole.tables[name].to_pylist() == chunked.tables[name].to_pylist(), name
        assert whole.details == chunked.details


def _trace(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return path


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 10, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def test_annotation_nesting(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#7", 0, 100),
        _x("user_annotation", "forward", 10, 40),
        _x("user_annotation", "attn", 12, 10),
        _x("user_annotation", "mlp", 30, 15),
        _x("user_annotation", "backward", 60, 30),
        _x("user_annotation", "other thread", 5, 200, tid=2),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "pid": 0, "tid": 7,
         "ts": 20, "dur": 90, "args": {"device": 0, "stream": 7}},
    ]
    kf = parse_kineto(_trace(tmp_path, events, baseTimeNanoseconds=1000), default_rank=0)
    ann = {r["name"] + ("@gpu" if r["source"] == "gpu_user" else ""): r
           for r in kf.tables["annotations"].to_pylist()}
    ids = {k: r["id"] for k, r in ann.items()}
    assert sorted(ids.values()) == list(range(7))
    expect = {  # name: (depth, parent)
        "ProfilerStep#7": (0, None), "forward": (1, "ProfilerStep#7"), "attn": (2, "forward"),
        "mlp": (2, "forward"), "backward": (1, "ProfilerStep#7"), "other thread": (0, None),
        "ProfilerStep#7@gpu": (0, None),
    }
    for name, (depth, parent) in expect.items():
        assert ann[name]["depth"] == depth, name
        assert ann[name]["parent_id"] == (None if parent is None else ids[parent]), name
    assert ann["ProfilerStep#7"]["source"] == "profiler_step"
    assert (ann["ProfilerStep#7@gpu"]["device"], ann["ProfilerStep#7@gpu"]["stream"]) == (0, 7)
    assert ann["attn"]["ts_ns"] == 1000 + 12_000
    # the GPU copy of ProfilerStep#7 is not a second step
    assert kf.tables["steps"].to_pylist()[0] | {"rank": 0} == {
        "rank": 0, "ts_ns": 1000, "dur_ns": 100_000, "step": 7, "source": "profiler_step",
        "name": "ProfilerStep#7"}
    assert kf.tables["steps"].num_rows == 1


def test_fractional_and_epoch_microseconds(tmp_path: Path) -> None:
    events = [_x("cpu_op", "a", 1695835542514261.25, 0.5),
              _x("cpu_op", "b", 4453852714239.341, 1.999)]
    kf = parse_kineto(_trace(tmp_path, events), default_rank=0)
    ops = kf.tables["cpu_ops"].to_pylist()
    by_name = {r["name"]: r for r in ops}
    assert by_name["a"]["ts_ns"] == 1_695_835_542_514_261_250 and by_name["a"]["dur_ns"] == 500
    assert by_name["b"]["ts_ns"] == 4_453_852_714_239_341 and by_name["b"]["dur_ns"] == 1999


def test_hip_strings_memory_events_and_flow_correlation(tmp_path: Path) -> None:
    events = [
        _x("cuda_runtime", "hipMemcpyWithStream", 1, 2, stream="0x0", correlation=5, cbid=None),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 3, "ts": 4, "dur": 1,
         "args": {"device": 0, "stream": 3, "grid": [2, 1, 1], "block": [64, 1, 1]}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 99, "pid": 0, "tid": 3, "ts": 4},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 1, "ts": 5,
         "s": "t", "args": {"Bytes": -512, "Total Allocated": 0, "Total Reserved": 2048,
                            "Device Id": 0, "Device Type": 1, "Addr": 1234}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 1, "ts": 6,
         "s": "t", "args": {"Bytes": 64, "Total Allocated": 64, "Total Reserved": 0,
                            "Device Id": -1, "Device Type": 0, "Addr": 99}},
        {"ph": "X", "cat": "weird_category", "name": "?", "pid": 10, "tid": 1, "ts": 1, "dur": 1},
    ]
    kf = parse_kineto(_trace(tmp_path, events), default_rank=0)
    assert kf.tables["kernels"].column("correlation").to_pylist() == [99]  # from the flow
    mem = kf.tables["memory_events"].to_pylist()
    got = [(m["device_type"], m["device"], m["bytes"]) for m in mem]
    assert got == [("gpu", 0, -512), ("cpu", None, 64)]
    api = kf.tables["api_calls"].to_pylist()[0]
    assert (api["kind"], api["correlation"], api["cbid"]) == ("memcpy", 5, None)
    (info,) = kf.diagnostics
    assert (info.level, info.code) == ("info", "unknown_category")
    assert "weird_category" in info.message


def test_run_query_on_an_imported_run(tmp_path: Path) -> None:
    out = import_traces([GPT], tmp_path / "gpt")
    run = Run(out)
    assert run.query("select count(*) as n from kernels").column("n")[0].as_py() == 1311
    assert run.manifest.source.tool.startswith("PyTorch profiler (Kineto)")
    assert run.manifest.clock_offset_ns == 1_790_857_026_000_000_000
    assert run.manifest.ranks[0].pid == 2352


def test_gzip_and_plain_json_give_the_same_tables(tmp_path: Path) -> None:
    plain = tmp_path / "cnn.json"  # a plain file is memory-mapped, a gzip one decompressed
    plain.write_bytes(gzip.decompress(CNN.read_bytes()))
    a, b = parse_kineto(CNN, default_rank=0), parse_kineto(plain, default_rank=0)
    assert a.tables.keys() == b.tables.keys()
    assert all(a.tables[k].equals(b.tables[k]) for k in a.tables)
    c = parse_kineto(plain, default_rank=0, chunk_bytes=1 << 14)  # mapped, in chunks
    assert all(a.tables[k].to_pylist() == c.tables[k].to_pylist() for k in a.tables)


def _old_format_events() -> list[dict[str, Any]]:
    """A torch 1.8-style trace (kineto tb_plugin's resnet50 samples): capitalised GPU and
    runtime categories, ``ProfilerStep#N`` an ``Operator``, epoch microseconds, GPU tids
    ``stream 7``."""
    t0 = 1_623_142_623_460_000
    events: list[dict[str, Any]] = []
    for i in range(3):
        s = t0 + i * 1000
        events += [
            {"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{i + 5}", "pid": 10,
             "tid": 10, "ts": s, "dur": 900, "args": {"External id": 100 * i + 1}},
            {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 10, "tid": 10,
             "ts": s + 10, "dur": 50, "args": {"External id": 100 * i + 2}},
            {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": "10",
             "ts": s + 20, "dur": 5, "args": {"cbid": 211, "correlation": 10 * i + 1}},
            {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "pid": 0,
             "tid": "stream 7", "ts": s + 30, "dur": 400,
             "args": {"device": 0, "stream": 7, "correlation": 10 * i + 1,
                      "grid": [80, 1, 1], "block": [256, 1, 1]}},
            {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
             "tid": "stream 7", "ts": s + 440, "dur": 20,
             "args": {"device": 0, "stream": 7, "correlation": 10 * i + 2, "bytes": 1024}},
            {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0,
             "tid": "stream 7", "ts": s + 470, "dur": 1,
             "args": {"device": 0, "stream": 7, "correlation": 10 * i + 3, "bytes": 64}},
            {"ph": "f", "id": 10 * i + 1, "pid": 0, "tid": "stream 7", "ts": s + 30,
             "cat": "async", "name": "launch", "bp": "e"},
        ]
    return events


@pytest.mark.parametrize("native", [False, True])
def test_torch_1_8_categories_and_operator_steps(tmp_path: Path, native: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.importers.kineto import native as kineto_native

    scanned = []
    scan = kineto_native.scan

    def counting(*args: Any, **kwargs: Any) -> Any:
        got = scan(*args, **kwargs)
        scanned.append(got is not None)
        return got

    monkeypatch.setattr(kineto_native, "scan", counting)
    # the ops first, in chunks of their own: the compiled scanner reads those (it gives the
    # chunks with capitalised categories back to msgspec), so the step markers are found
    # whichever path read them
    events = sorted(_old_format_events(), key=lambda e: e["cat"] != "Operator")
    kf = parse_kineto(_trace(tmp_path, events), default_rank=0, native=native, chunk_bytes=600)
    assert any(scanned) == (native and kineto_native.EXTENSION is not None)
    assert count(kf, "kernels") == 3 and count(kf, "memcpy") == 3 and count(kf, "memset") == 3
    assert count(kf, "api_calls", name="cudaLaunchKernel", domain="runtime") == 3
    assert kf.tables["steps"].column("step").to_pylist() == [5, 6, 7]
    assert count(kf, "annotations", source="profiler_step") == 3
    # the step markers left cpu_ops (a new trace has them only as annotations)
    assert count(kf, "cpu_ops") == 3 and count(kf, "cpu_ops", name="aten::conv2d") == 3
    unknown = [d for d in kf.diagnostics if d.code == "unknown_category"]
    assert len(unknown) == 1 and "async (3)" in unknown[0].message  # the flows, nothing else


def test_torch_1_8_trace_reports_its_gpu_and_steps(tmp_path: Path) -> None:
    from stepscope.reporters.report import build_report

    run = Run(import_traces([_trace(tmp_path, _old_format_events())], tmp_path / "run"))
    rep = build_report(run)
    (ra,) = rep.analysis.ranks
    assert ra.steps.source == "profiler_step" and len(ra.steps.steps) == 3
    assert ra.kernel_count == 3 and ra.gpu.use.value == "recorded"


def test_mtia_device_events_are_said_to_be_skipped(tmp_path: Path) -> None:
    events = [_x("cpu_op", "aten::mm", 0, 100),
              {"ph": "X", "cat": "mtia_ccp_events", "name": "event_wait", "pid": 17, "tid": 3,
               "ts": 10, "dur": 50, "args": {"stream": 108}},
              {"ph": "X", "cat": "mtia_ccp_events", "name": "kernel", "pid": 17, "tid": 3,
               "ts": 60, "dur": 30, "args": {"stream": 108}}]
    kf = parse_kineto(_trace(tmp_path, events, baseTimeNanoseconds=1000), default_rank=0)
    (d,) = [d for d in kf.diagnostics if d.code == "device_events_skipped"]
    assert d.level == "warning" and d.count == 2 and "MTIA" in d.message
