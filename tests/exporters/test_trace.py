from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from builder import TraceBuilder
from stepscope.cli.main import main
from stepscope.exporters.trace import TraceExport, export_trace, trace_json
from stepscope.importers import import_traces
from stepscope.store.run import Run

DATA = Path(__file__).parent.parent / "data"
GPT = DATA / "gpt_bf16_adamw.pt.trace.json.gz"
HOSTILE = 'k"},{"ph":"X","name":"pwn"}\\\n\t\x00\x1f</script><img src=x> µs ✓ \u2028 [bold]x[/bold]'

# -- the Trace Event Format, checked strictly --------------------------------------------
NUMBER = (int, float)
REQUIRED = {  # keys every event of the phase must have, with their types
    "X": {"name": str, "cat": str, "ts": NUMBER, "dur": NUMBER, "pid": int, "tid": int, "args": dict},
    "M": {"name": str, "pid": int, "args": dict},
    "C": {"name": str, "ts": NUMBER, "pid": int, "args": dict},
    "s": {"name": str, "cat": str, "id": int, "ts": NUMBER, "pid": int, "tid": int},
    "f": {"name": str, "cat": str, "id": int, "ts": NUMBER, "pid": int, "tid": int, "bp": str},
}
ALLOWED = {"X": {"ph", "name", "cat", "ts", "dur", "pid", "tid", "args"},
           "M": {"ph", "name", "pid", "tid", "ts", "args"},
           "C": {"ph", "name", "ts", "pid", "args"},
           "s": {"ph", "name", "cat", "id", "ts", "pid", "tid"},
           "f": {"ph", "name", "cat", "id", "ts", "pid", "tid", "bp"}}
METADATA = {"process_name": ("name", str), "thread_name": ("name", str),
            "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int)}


def validate(raw: bytes) -> dict[str, Any]:
    """Parse and check every event against the spec; returns the document."""
    doc = json.loads(raw)
    assert isinstance(doc, dict) and list(doc) == ["displayTimeUnit", "otherData", "traceEvents"]
    assert doc["displayTimeUnit"] == "ns"
    # Perfetto reads displayTimeUnit only from the file's first bytes
    assert raw.startswith(b'{"displayTimeUnit":"ns"')
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        assert ph in REQUIRED, e
        for key, typ in REQUIRED[ph].items():
            assert isinstance(e.get(key), typ) and not isinstance(e.get(key), bool), (key, e)
        assert set(e) <= ALLOWED[ph], e
        # no top-level array values (old Perfetto tokenizers give up on one before "ts")
        assert not any(isinstance(v, list) for v in e.values()), e
        if ph != "M":
            assert e["ts"] >= 0, e
        if ph == "X":
            assert e["dur"] >= 0
        if ph == "M":
            key, typ = METADATA[e["name"]]
            assert isinstance(e["args"][key], typ), e
            if e["name"].startswith("thread"):
                assert isinstance(e.get("tid"), int), e
        if ph == "C":
            assert e["args"] and all(isinstance(v, NUMBER) for v in e["args"].values()), e
        if ph == "f":
            assert e["bp"] == "e"
    # ts/dur: microseconds with exactly 3 decimals, as written
    text = raw.decode()
    timed = sum(1 for e in doc["traceEvents"] if e["ph"] != "M")
    assert len(re.findall(r'"ts":\d+\.\d{3}[,}]', text)) == timed
    return doc


def names(doc: dict[str, Any]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    return procs, threads


def small_run(tmp_path: Path, name: str = "run") -> Run:
    b = TraceBuilder()
    b.step(0, 1000, step=0)  # steps row + ProfilerStep#0 annotation on tid 100
    b.nvtx(HOSTILE, 5, 500)
    b.cpu_op("aten::mm", 10, 100)
    b.kernel("gemm", 200, 50.5, launch=(20, 5), grid=(8, 2, 1), block=(128, 1, 1), regs=64,
             smem=1024)
    b.memcpy("HtoD", 300, 10, 1_000_000, api=("cudaMemcpyAsync", 30, 4))
    b.memset(400, 1)  # no API call: no flow
    b.kernel(HOSTILE, 500, 10, regs=None, smem=None)  # no launch: no flow
    b.input_wait(600, 50)
    b.memory(100, 1024, 2048, 4096)
    b.sample("gpu.sm_util", 150, 87.5, device=0)
    b.sample("cpu.util", 150, 12.0)
    b._add("threads", 0, pid=100, tid=100, name=HOSTILE + " main")
    return b.build(tmp_path / name)


def test_small_run_by_hand(tmp_path: Path) -> None:
    doc = validate(trace_json(small_run(tmp_path)))
    ev = doc["traceEvents"]
    assert Counter(e["ph"] for e in ev) == {"X": 11, "M": 12, "s": 2, "f": 2, "C": 4}
    procs, threads = names(doc)
    host = next(p for p, n in procs.items() if n == "rank 0 · (pid 100)")
    gpu = next(p for p, n in procs.items() if n == "rank 0 · GPU 0 · NVIDIA H100 80GB HBM3")
    assert len(procs) == 2
    assert threads[(host, 100)] == HOSTILE + " main"
    assert sorted(n for (p, _), n in threads.items() if p == host) == sorted(
        [HOSTILE + " main", "steps", "input waits"])
    assert threads[(gpu, 7)] == "stream 7"
    # the kernel: µs relative to the first event (the step at 0), exact
    (gemm,) = [e for e in ev if e["ph"] == "X" and e["name"] == "gemm"]
    assert (gemm["pid"], gemm["tid"], gemm["cat"]) == (gpu, 7, "kernel")
    assert (gemm["ts"], gemm["dur"]) == (200.0, 50.5)
    assert gemm["args"] == {"grid": [8, 2, 1], "block": [128, 1, 1], "registers": 64,
                            "shared_memory": 1024, "device": 0, "stream": 7, "correlation": 1001}
    (orphan,) = [e for e in ev if e["ph"] == "X" and e["cat"] == "kernel" and e is not gemm]
    assert orphan["name"] == HOSTILE and "registers" not in orphan["args"]  # null args left out
    (copy,) = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    assert copy["name"] == "Memcpy HtoD (pinned -> device)"
    assert copy["args"]["bytes"] == 1_000_000 and copy["args"]["bandwidth (GB/s)"] == 100.0
    assert (copy["args"]["src_kind"], copy["args"]["dst_kind"]) == ("pinned", "device")
    # flows: one pair per launched activity, id in kernels-then-copies order
    flows = {(e["ph"], e["id"]): e for e in ev if e["ph"] in "sf"}
    assert sorted(flows) == [("f", 1), ("f", 2), ("s", 1), ("s", 2)]
    assert (flows["s", 1]["pid"], flows["s", 1]["tid"], flows["s", 1]["ts"]) == (host, 100, 20.0)
    assert (flows["f", 1]["pid"], flows["f", 1]["tid"], flows["f", 1]["ts"]) == (gpu, 7, 200.0)
    assert (flows["s", 2]["ts"], flows["f", 2]["ts"]) == (30.0, 300.0)
    assert {(e["cat"], e["name"]) for e in flows.values()} == {("flow", "launch")}
    # host side: annotations nest on the thread, steps and input waits have their own tracks
    on_main = sorted((e["ts"], e["name"]) for e in ev if e["ph"] == "X" and e["tid"] == 100)
    assert on_main == [(0.0, "ProfilerStep#0"), (5.0, HOSTILE), (10.0, "aten::mm"),
                       (20.0, "cudaLaunchKernel"), (30.0, "cudaMemcpyAsync")]
    steps = [e for e in ev if e.get("cat") == "step"]
    assert [(s["name"], s["dur"], threads[(s["pid"], s["tid"])]) for s in steps] == [
        ("ProfilerStep#0", 1000.0, "steps")]
    (wait,) = [e for e in ev if e.get("cat") == "input_wait"]
    assert threads[(wait["pid"], wait["tid"])] == "input waits" and wait["args"]["tid"] == 100
    # counters: GPU metrics and allocator totals on the GPU process, host metrics on the host
    counters = sorted((procs[e["pid"]], e["name"], e["ts"], e["args"]) for e in ev if e["ph"] == "C")
    assert counters == sorted([
        (procs[gpu], "gpu.sm_util", 150.0, {"value": 87.5}),
        (procs[gpu], "memory allocated", 100.0, {"bytes": 2048}),
        (procs[gpu], "memory reserved", 100.0, {"bytes": 4096}),
        (procs[host], "cpu.util", 150.0, {"value": 12.0}),
    ])
    other = doc["otherData"]
    assert other["run"] == str(tmp_path / "run") and other["clock_offset_ns"] == 0
    assert other["origin_ns"] == 0 and other["schema"] == "stepscope.trace/1"


def test_order_nests_parents_first_and_windows_do_not_change_bytes(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("inner", 10, 5)  # same start as outer, shorter: must come after it
    b.annotation("outer", 10, 50)
    b.cpu_op("op", 10, 20)
    for i in range(20):
        b.kernel(f"k{i}", 100 + i, 0.5, launch=(11 + i, 0.5))
    run = b.build(tmp_path / "run")
    ref = trace_json(run)
    ev = validate(ref)["traceEvents"]
    first = [e["name"] for e in ev if e["ph"] == "X" and e["ts"] == 0.0]  # the origin is 10 µs
    assert first == ["outer", "op", "inner"]
    ts = [e["ts"] for e in ev if e["ph"] != "M"]
    assert ts == sorted(ts)
    for window, threads in ((1, 1), (3, 2), (7, 4)):
        buf = io.BytesIO()
        TraceExport(run, window=window).write(buf)
        assert buf.getvalue() == ref
        assert b"".join(TraceExport(run).chunks()) == ref
        assert b"".join(r for r, _ in TraceExport(run, window=window).pieces(threads=threads)) == ref


def test_flows_follow_rank_and_correlation(tmp_path: Path) -> None:
    b = TraceBuilder()
    for rank in (0, 1):  # the same correlation id on both ranks
        b.kernel(f"k{rank}", 100 + rank, 5, correlation=7, launch=(10 + rank, 2), rank=rank)
    doc = validate(trace_json(b.build(tmp_path / "run")))
    procs, _ = names(doc)
    ev = doc["traceEvents"]
    kern = {e["name"]: e for e in ev if e["ph"] == "X" and e["cat"] == "kernel"}
    assert procs[kern["k0"]["pid"]].startswith("rank 0 · GPU 0")
    assert procs[kern["k1"]["pid"]].startswith("rank 1 · GPU 0")
    s = {e["id"]: e for e in ev if e["ph"] == "s"}
    f = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert sorted(s) == sorted(f) == [1, 2]
    for i in (1, 2):
        rank = procs[f[i]["pid"]].split(" ")[1]
        assert procs[s[i]["pid"]].startswith(f"rank {rank} ·")
        assert s[i]["ts"] == int(rank) and f[i]["ts"] == 90 + int(rank)  # origin: 10 µs


def test_files_gzip_round_trip_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path)
    ref = trace_json(run)
    plain = export_trace(run, tmp_path / "t.json")
    assert (tmp_path / "t.json").read_bytes() == ref and plain.bytes == len(ref)
    packed = export_trace(run, tmp_path / "t.json.gz")
    data = (tmp_path / "t.json.gz").read_bytes()
    assert gzip.decompress(data) == ref and packed == plain
    d = zlib.decompressobj(wbits=31)  # one gzip member, nothing after it
    assert d.decompress(data) == ref and d.eof and d.unused_data == b""
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # CLI: default name next to the run, explicit -o, bad inputs -> one line, exit 2
    assert main(["export", str(tmp_path / "run")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert gzip.decompress((tmp_path / "run.trace.json.gz").read_bytes()) == ref
    assert main(["export", str(tmp_path / "run"), "-o", str(tmp_path / "c.json")]) == 0
    assert "11 slices, 2 launch flows, 4 counter values" in capsys.readouterr().out
    (tmp_path / "afile").write_text("x")
    for args in (["export", str(tmp_path / "no-run"), "-o", str(tmp_path / "x.json")],
                 ["export", str(tmp_path / "afile"), "-o", str(tmp_path / "x.json")],
                 ["export", str(tmp_path / "run"), "-o", str(tmp_path / "afile" / "x.json")],
                 ["export", str(tmp_path / "run"), "-o", str(tmp_path / "x.txt")]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("stepscope: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def test_empty_run_is_valid(tmp_path: Path) -> None:
    path = tmp_path / 'run "x"\\ <µ>'
    doc = validate(trace_json(TraceBuilder().build(path)))
    assert {e["ph"] for e in doc["traceEvents"]} == {"M"}
    assert doc["otherData"]["run"] == str(path)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any]]:
    run = Run(import_traces([GPT], tmp_path_factory.mktemp("gpt") / "gpt"))
    return run, validate(trace_json(run))


def test_demo_fixture_kernels_and_flows(gpt: tuple[Run, dict[str, Any]]) -> None:
    run, doc = gpt
    ev = doc["traceEvents"]
    procs, threads = names(doc)
    kernels = [e for e in ev if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(kernels) == 1311  # every kernel once, on the GPU process
    assert {procs[e["pid"]] for e in kernels} == {"rank 0 · GPU 0 · NVIDIA H100 80GB HBM3"}
    assert Counter(e["name"] for e in kernels) == Counter(run.table("kernels")["name"].to_pylist())
    assert round(sum(e["dur"] for e in kernels) * 1000) == sum(run.table("kernels")["dur_ns"].to_pylist())
    launched = run.query("""
        select count(*) from (select rank, correlation from kernels union all
                              select rank, correlation from memcpy union all
                              select rank, correlation from memset) g
        where exists (select 1 from api_calls a where a.rank = g.rank and a.correlation = g.correlation)
    """).column(0)[0].as_py()
    s = {e["id"]: e for e in ev if e["ph"] == "s"}
    f = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(s) == len(f) == launched == 1311 + 57 + 198
    # each end sits on a slice that starts there: the API call (s) and the GPU activity (f)
    starts = defaultdict(set)
    for e in ev:
        if e["ph"] == "X":
            starts[(e["pid"], e["tid"], e["ts"])].add(e["cat"])
    for i in s:
        assert starts[(s[i]["pid"], s[i]["tid"], s[i]["ts"])] & {"cuda_runtime", "cuda_driver"}
        assert starts[(f[i]["pid"], f[i]["tid"], f[i]["ts"])] & {"kernel", "gpu_memcpy", "gpu_memset"}
    assert threads[(kernels[0]["pid"], 7)] == "stream 7"
    assert "thread 2352 (python3)" in threads.values()
    assert doc["otherData"]["clock_offset_ns"] == run.manifest.clock_offset_ns


def test_demo_fixture_tracks_nest(gpt: tuple[Run, dict[str, Any]]) -> None:
    """X events on one track nest, except where the source itself overlaps: Kineto's
    python_function events around record_function (the same overlaps are in its own file)."""
    _, doc = gpt
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    for evs in tracks.values():
        assert [(e["ts"], -e["dur"]) for e in evs] == sorted((e["ts"], -e["dur"]) for e in evs)
        stack: list[dict[str, Any]] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + 1e-9:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-9:
                assert "python_function" in (e["cat"], stack[-1]["cat"]), (e, stack[-1])
            stack.append(e)
