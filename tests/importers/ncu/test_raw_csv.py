from __future__ import annotations

from pathlib import Path

import pytest
from tests.importers.ncu.synth import raw_csv

from stepscope.cli.main import main
from stepscope.errors import RunError, TraceFormatError
from stepscope.importers.ncu import attach_profiles, import_profiles, is_ncu_file, read_profile
from stepscope.importers.ncu.units import base_unit, dims, number
from stepscope.store.run import Run

DATA = Path(__file__).parent.parent.parent / "data"
UNITS = {"gpu__time_duration.sum": "usecond", "dram__bytes_read.sum": "Mbyte",
         "launch__registers_per_thread": "register/thread",
         "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst",
         "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": "inst",
         "launch__shared_mem_per_block_static": "Kbyte",
         "launch__shared_mem_per_block_dynamic": "byte"}


def one(**cells: str) -> str:
    base = {"Kernel Name": "copy_bytes(const unsigned char*, unsigned char*, int)",
            "gpu__time_duration.sum": "12.5", "dram__bytes_read.sum": "1,048.576",
            "launch__registers_per_thread": "16",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "1,000",
            "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": "n/a",
            "launch__shared_mem_per_block_static": "4.096",
            "launch__shared_mem_per_block_dynamic": "1,024"}
    return raw_csv([{**base, **cells}], UNITS, noise="==PROF== Connected to process 1\nhi\n")


def test_units_values_and_dims() -> None:
    assert base_unit("usecond") == (1e-6, "second")
    assert base_unit("Gbyte/second") == (1e9, "byte/second")
    assert base_unit("cycle/nsecond") == (pytest.approx(1e9), "cycle/second")
    assert base_unit("Kbyte") == (1e3, "byte")
    assert base_unit("%") == (1.0, "%")
    assert number("1,234,567.5") == 1234567.5 and number("n/a") is None and number("") is None
    assert dims("(256, 1, 1)") == (256, 1, 1) and dims("256") is None


def test_a_raw_page_becomes_typed_columns_in_base_units(tmp_path: Path) -> None:
    f = tmp_path / "k.csv"
    f.write_text(one())
    assert is_ncu_file(f)
    p = read_profile(f)
    m = p.metrics
    assert m["dur_ns"] == [12500]  # 12.5 us
    assert m["dram_read_bytes"] == [1048576000.0]  # 1,048.576 Mbyte
    assert m["registers"] == [16] and m["shared_memory"] == [4096 + 1024]
    assert m["fp32_flops"] == [2000.0]  # 2 x ffma; fadd n/a: left out
    assert (m["grid_x"], m["block_x"], m["pid"], m["stream"]) == ([1024], [256], [4242], [7])
    # every metric kept, long format; n/a as text
    i = p.values["metric"].index("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum")
    assert p.values["value"][i] is None and p.values["text"][i] == "n/a"
    assert len(p.values["metric"]) == len(UNITS)


def test_a_bom_and_windows_line_ends_are_read(tmp_path: Path) -> None:
    f = tmp_path / "k.csv"
    f.write_bytes(b"\xef\xbb\xbf" + one().replace("\n", "\r\n").encode())
    assert read_profile(f).metrics["dur_ns"] == [12500]


@pytest.mark.parametrize("text, why", [
    ("hello\n", "no header row"),
    ('"ID","Process ID","Kernel Name","Section Name","Metric Name","Metric Value"\n'
     '"0","1","k","s","m","1"\n', "details-page"),
    ('"ID","Process ID","Kernel Name","a__b"\n"","","",""\n', "no profiled launches"),
    ('"ID","Process ID","Kernel Name","a__b"\n"","","",""\n"0","1","k"\n', "truncated"),
])
def test_bad_exports_are_one_line_errors(tmp_path: Path, text: str, why: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(TraceFormatError, match=why):
        read_profile(f)


def test_a_report_without_ncu_says_how_to_export(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "r.ncu-rep"
    f.write_bytes(b"\x00binary")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TraceFormatError, match="ncu is not on PATH.*--page raw"):
        read_profile(f)


def test_a_report_is_exported_through_ncu_on_path(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    csv = tmp_path / "k.csv"
    csv.write_text(one())
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\ncat {csv}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(b"\x00")
    assert read_profile(rep).metrics["dur_ns"] == [12500]
    assert "--page raw" in (tmp_path / "args").read_text()


def test_alone_and_into_a_run(tmp_path: Path) -> None:
    f = tmp_path / "k.csv"
    f.write_text(one())
    alone = Run(import_profiles([f], tmp_path / "alone"))
    assert alone.manifest.source.kind == "ncu" and alone.table("kernel_metrics").num_rows == 1
    assert "missing_tables" not in {d.code for d in alone.manifest.diagnostics}
    trace = DATA / "cnn_fp32_sync.pt.trace.json.gz"
    assert main(["import", str(trace), "-o", str(tmp_path / "r"), "--quiet"]) == 0
    before = Run(tmp_path / "r").table("kernels")
    attach_profiles([f], tmp_path / "r")
    attach_profiles([f, f], tmp_path / "r")  # again: replaces, never adds up
    run = Run(tmp_path / "r")
    assert run.table("kernels").equals(before)
    assert run.table("kernel_metrics").num_rows == 2
    assert run.manifest.tables["kernel_metrics"] == 2
    assert sorted(run.table("kernel_metrics").column("id").to_pylist()) == [0, 1]
    assert run.manifest.source.details["ncu"]["launches"] == 2
    with pytest.raises(RunError, match="no rank 3"):
        attach_profiles([f], tmp_path / "r", rank=3)
    assert Run(tmp_path / "r").table("kernel_metrics").num_rows == 2  # unchanged


def test_a_failed_attach_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    f = tmp_path / "k.csv"
    f.write_text(one())
    g = tmp_path / "bad.csv"
    g.write_text("nope\n")
    run_dir = import_profiles([f], tmp_path / "alone")
    with pytest.raises(TraceFormatError):
        attach_profiles([g], run_dir)
    assert Run(run_dir).table("kernel_metrics").num_rows == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone", "bad.csv", "k.csv"]


def test_cli_import_of_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "k.csv"
    f.write_text(one())
    assert main(["import", str(f)]) == 0
    assert (tmp_path / "k.stepscope" / "kernel_metrics").is_dir()
    trace = DATA / "cnn_fp32_sync.pt.trace.json.gz"
    assert main(["import", str(trace), str(f), "-o", str(tmp_path / "both"), "--quiet"]) == 0
    assert Run(tmp_path / "both").table("kernel_metrics").num_rows == 1
    assert main(["import", str(f), "--into", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    # the report of a counters-only run says what it holds, not "no GPU activity"
    assert main(["report", str(tmp_path / "k.stepscope"), "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert "Nsight Compute counters of 1 kernel launch " in out
    assert "none recorded" not in out


def test_source_page_gives_hot_lines(tmp_path: Path) -> None:
    from stepscope.advisor.engine import advise
    from stepscope.analysis import analyze

    ncu = DATA / "ncu"
    run = Run(import_profiles([ncu / "planted.raw.csv", ncu / "planted.source.csv"],
                              tmp_path / "r"))
    lines = run.table("kernel_source_lines")
    assert sorted(set(lines.column("kernel").to_pylist())) == sorted(
        set(run.table("kernel_metrics").column("name").to_pylist()))
    # planted_narrow_load: line 7 of the CuPy source, `out[i] = in[i] + 1`: 4418 of its
    # samples over all its source lines
    rows = [r for r in lines.to_pylist() if r["kernel"] == "planted_narrow_load"]
    total = sum(r["samples"] for r in rows)
    top = max(rows, key=lambda r: r["samples"])
    assert top["line"] == 7 and top["source"] is None  # the JIT's temporary file is gone
    assert top["share"] == pytest.approx(top["samples"] / total)
    f = next(x for x in advise(analyze(run)).findings if x.id == "kernel_narrow_loads")
    assert any(e.startswith("hottest source line: ") and f":7 ({top['share']:.0%}" in e
               for e in f.evidence)
    with pytest.raises(TraceFormatError, match="source-page export alone"):
        import_profiles([ncu / "planted.source.csv"], tmp_path / "s")
