"""Real XSpace files: the kernel, copy and step figures of ``shared/fixtures/xspace/README.md``
(computed there from the protobuf, independently of stepscope), the H100 JAX run against its
own trace-event JSON export, and whole imports through the CLI."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stepscope.cli.main import main
from stepscope.importers.xspace.parse import parse_xspace

DATA = Path(__file__).parent.parent.parent / "data"
X = DATA / "xspace"


def per_device(t: pa.Table) -> dict[int, tuple[int, int]]:
    """device -> (rows, sum of dur_ns)."""
    out = {}
    for d in sorted(set(t.column("device").to_pylist())):
        rows = t.filter(pc.equal(t.column("device"), d))
        out[d] = (rows.num_rows, pc.sum(rows.column("dur_ns")).as_py())
    return out


def blits(t: pa.Table) -> int:
    return sum(1 for n in t.column("name").to_pylist() if n.startswith("__amd_rocclr"))


def test_tf_bert_v100() -> None:
    b = parse_xspace(X / "tf_bert_multiworker_v100.xplane.pb.gz", default_rank=0)
    # README: GPU:4 665 kernels, 14 825 385 000 ps; GPU:6 665, 14 865 363 000 ps;
    # copies 94 / 113 / 19 (GPU 4 / 6 / 1), 198 429 000 / 239 136 000 / 33 792 000 ps
    assert per_device(b.tables["kernels"]) == {4: (665, 14_825_385), 6: (665, 14_865_363)}
    assert per_device(b.tables["memcpy"]) == {1: (19, 33_792), 4: (94, 198_429),
                                              6: (113, 239_136)}
    assert "memset" not in b.tables
    # the Steps line of GPU:4: one step of 19 865 491 000 ps
    assert b.tables["steps"].select(["step", "dur_ns"]).to_pylist() == [
        {"step": 0, "dur_ns": 19_865_491}]
    assert b.details["framework"] == "tensorflow"
    dev = {r["device"]: r for r in b.tables["devices"].to_pylist()}
    assert sorted(dev) == [1, 4, 6]
    assert (dev[4]["sm_count"], dev[4]["compute_major"], dev[4]["clock_khz"],
            dev[4]["memory_bandwidth_gbs"]) == (80, 7, 1_530_000, 898.048)
    k = b.tables["kernels"]
    assert k.filter(pc.is_null(k.column("grid_x"))).num_rows == 0  # every launch config read
    assert b.tables["input_waits"].num_rows > 0


@pytest.mark.parametrize("name, want, blit", [
    ("tracelens_jax08_gemm_mi300x.xplane.pb", {0: (54, 3_475_484)}, 24),
    ("tracelens_jax08_conv_8gpu_mi300x.xplane.pb",
     {0: (60, 4_000_165), 1: (25, 3_345_845), 2: (25, 3_524_285), 3: (25, 3_403_364),
      4: (25, 3_493_365), 5: (25, 3_464_884), 6: (25, 3_403_004), 7: (25, 3_502_165)}, 35),
    ("tracelens_jax_conv_minimal_legacy_mi300x.xplane.pb", {7: (25, 3_586_493)}, 0),
])
def test_jax_on_mi300x(name: str, want: dict[int, tuple[int, int]], blit: int) -> None:
    b = parse_xspace(X / name, default_rank=0)
    assert per_device(b.tables["kernels"]) == want
    assert blits(b.tables["kernels"]) == blit
    assert b.details["framework"] == "jax"
    assert {r["vendor"] for r in b.tables["devices"].to_pylist()} == {"amd"}
    assert sorted(r["device"] for r in b.tables["devices"].to_pylist()) == sorted(
        {*want, *per_device(b.tables["memcpy"])} if "memcpy" in b.tables else want)
    api = b.tables["api_calls"].to_pylist()
    assert api and all(r["name"].startswith("hip") for r in api if r["kind"] != "sync")
    # the benchmark loops' jax.block_until_ready (Python tracer frames), one per iteration
    waits = [r for r in api if r["kind"] == "sync"]
    assert {r["name"] for r in waits} <= {"jax.block_until_ready"}
    assert len(waits) == {"tracelens_jax08_gemm_mi300x.xplane.pb": 0}.get(name, len(waits))


def test_legacy_jax_copies() -> None:
    # README: GPU:0 53 copies (CopyDeviceToDevice on MemcpyOther streams), 889 028 000 ps
    b = parse_xspace(X / "tracelens_jax_conv_minimal_legacy_mi300x.xplane.pb", default_rank=0)
    assert per_device(b.tables["memcpy"]) == {0: (53, 889_028)}
    assert set(b.tables["memcpy"].column("kind").to_pylist()) == {"DtoD"}
    assert pc.sum(b.tables["memcpy"].column("bytes")).as_py() == 53 * 655_360


def test_jax_mlp_h100_matches_its_json_export() -> None:
    b = parse_xspace(X / "jax_mlp.xplane.pb", default_rank=0)
    doc = json.loads(gzip.decompress((DATA / "jax_mlp.trace.json.gz").read_bytes()))
    gpu_pid = next(e["pid"] for e in doc["traceEvents"]
                   if e.get("name") == "process_name" and e["args"]["name"] == "/device:GPU:0")
    want = sorted((round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"])
                  for e in doc["traceEvents"] if e.get("pid") == gpu_pid and e.get("ph") == "X")
    k = b.tables["kernels"]
    start = b.clock_offset_ns  # the JSON counts microseconds from the profile's start
    got = sorted((ts - start, dur, n) for ts, dur, n in zip(
        k.column("ts_ns").to_pylist(), k.column("dur_ns").to_pylist(),
        k.column("name").to_pylist()))
    assert len(got) == len(want) == 195
    assert got == want
    assert start == 1_795_310_753_594_645_708  # Task Environment's profile_start_time
    steps = b.tables["steps"].to_pylist()
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4] and steps[0]["name"] == "train"
    graph = b.tables["api_calls"].filter(pc.equal(b.tables["api_calls"].column("kind"),
                                                  "graph_launch"))
    assert graph.num_rows == 5 and set(graph.column("name").to_pylist()) == {"cuGraphLaunch"}
    dev = b.tables["devices"].to_pylist()[0]
    assert (dev["name"], dev["sm_count"], dev["compute_major"]) == \
        ("NVIDIA H100 80GB HBM3", 132, 9)


def test_import_a_tensorboard_run_folder_of_two_hosts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_11_26_15_00_00"
    run.mkdir(parents=True)
    shutil.copy(X / "tracelens_jax08_gemm_mi300x.xplane.pb", run / "hostA.xplane.pb")
    shutil.copy(X / "tracelens_jax08_conv_8gpu_mi300x.xplane.pb", run / "hostB.xplane.pb")
    (run / "hostA.trace.json.gz").write_bytes((DATA / "jax_mlp.trace.json.gz").read_bytes())
    out = tmp_path / "run"
    assert main(["import", str(tmp_path / "logs"), "-o", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["source"]["kind"] == "xspace" and len(m["ranks"]) == 2
    assert [r["file"].endswith(f"host{h}.xplane.pb") for r, h in zip(m["ranks"], "AB")] == \
        [True, True]
    assert any(d["code"] == "skipped_file" for d in m["diagnostics"])  # the JSON export
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["run"]["frameworks"] == ["jax"]


def test_jax_run_advice_speaks_jax(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["import", str(X / "jax_mlp.xplane.pb"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Steps: 5 from" in text
    fixes = [ln for ln in text.splitlines() if ln.strip().startswith("fix:")]
    assert fixes and all("torch" not in ln for ln in fixes)


def test_tf_run_report_has_the_input_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["import", str(X / "tf_bert_multiworker_v100.xplane.pb.gz"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    v = rep["input_pipeline"]
    assert rep["run"]["frameworks"] == ["tensorflow"]
    assert v["verdict"] == "moderately" and 5 <= v["input_bound_pct"] <= 20
    assert v["text"] == "moderately input-bound"
    fix = next(f["fix"] for f in rep["findings"] if f["id"] == "input_bound")
    assert "tf.data.AUTOTUNE" in fix["tensorflow"]


@pytest.mark.parametrize("content, problem", [
    (b"\x0a\x05\x12\x03/ho\x0a\x03\xff\xff\xff", "not a valid XPlane"),
    (b"\x00junk", "not an XSpace profile"),
])
def test_bad_xspace_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       content: bytes, problem: str) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(content)
    assert main(["import", str(bad), "-o", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and problem in err and str(bad) in err
    assert not (tmp_path / "run").exists()
