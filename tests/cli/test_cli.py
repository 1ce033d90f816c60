from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stepscope.cli.main import main

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "cnn"
    assert main(["import", str(CNN), "-o", str(out)]) == 0
    return out


def test_import_report_json_contract(cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(cnn_run), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "stepscope.report/1"
    s = rep["summary"]
    # figures from ../shared/fixtures/README.md: 3 steps, 38.0 ms wall, GPU busy 35.4 ms, 288 kernels
    assert s["steps"] == 3 and s["kernels"] == 288
    assert s["marker_wall_ms"] == pytest.approx(38.0, abs=0.05)
    assert s["gpu_busy_in_markers_ms"] == pytest.approx(35.4, abs=0.05)
    assert s["wall_ms"] == pytest.approx(38.0, abs=0.2)  # GPU-anchored windows (analysis.md)
    assert s["kernel_time_ms"] == pytest.approx(sum(k["total_ms"] for k in rep["kernels"]), rel=0.01)
    assert len(rep["steps"]) == 3
    for st in rep["steps"]:
        assert sum(st["breakdown"].values()) == pytest.approx(st["wall_ms"], abs=1e-5)
    assert sum(rep["breakdown"].values()) == pytest.approx(s["step_ms"]["mean"], abs=1e-4)
    assert {"name", "calls", "total_ms", "occupancy", "tensor_cores", "precision", "category",
            "grid", "block", "registers", "shared_memory", "sm_coverage"} <= set(rep["kernels"][0])
    assert isinstance(rep["findings"], list)


def test_report_text_and_files(cnn_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(cnn_run)]) == 0
    out = capsys.readouterr().out
    assert "Steps: 3 from the trace's ProfilerStep markers" in out and "GPU busy" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["report", str(cnn_run), "-o", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "stepscope.report/1"


def test_query(cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "select src_kind, count(*) as n from memcpy where kind = 'HtoD' group by 1"
    assert main(["query", str(cnn_run), sql, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"src_kind": "pageable", "n": 6}]
    assert main(["query", str(cnn_run), "select nope from kernels"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: query failed") and err.count("\n") == 1


def test_bad_inputs_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trunc = tmp_path / "t.json.gz"
    trunc.write_bytes(gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 1000)[:200])
    notrace = tmp_path / "n.json"
    notrace.write_text("[1, 2, 3]")
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["import", str(trunc), "-o", str(tmp_path / "r1")],
                 ["import", str(notrace), "-o", str(tmp_path / "r2")],
                 ["import", str(empty), "-o", str(tmp_path / "r3")],
                 ["import", str(tmp_path / "missing.json"), "-o", str(tmp_path / "r4")],
                 ["report", str(tmp_path / "no-run")],
                 ["query", str(empty), "select 1"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (args, err)
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_import_refuses_to_overwrite_without_force(cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(CNN), "-o", str(cnn_run)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["import", str(CNN), "-o", str(cnn_run), "--force"]) == 0


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["--version"]) == 0
    assert "stepscope" in capsys.readouterr().out


def test_demo_runs_without_gpu_or_framework(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "-o", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    for name in ("gpt_bf16_adamw", "cnn_fp32_sync"):
        rep = json.loads((tmp_path / "demo" / f"{name}.report.json").read_text())
        assert rep["schema"] == "stepscope.report/1"
        assert (tmp_path / "demo" / f"{name}.report.txt").read_text().startswith("stepscope")
        assert f"{name}.report.json" in out
    gpt = json.loads((tmp_path / "demo" / "gpt_bf16_adamw.report.json").read_text())
    # fixture README: 3 steps, 119.5 ms wall, GPU busy 36.3 ms, 1311 kernels
    assert gpt["summary"]["kernels"] == 1311
    assert gpt["summary"]["gpu_busy_in_markers_ms"] == pytest.approx(36.3, abs=0.05)
    assert gpt["summary"]["marker_wall_ms"] == pytest.approx(119.5, abs=0.05)
