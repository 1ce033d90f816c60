"""``stepscope report --untraced-step-ms``: the remedies calibrated to the step the user gives,
in the JSON and on the terminal; a value that is not a step time, or a run whose steps are not
the program's, is one line on stderr and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepscope.cli.main import main
from stepscope.importers import import_traces

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_traces([DATA / "cnn_fp32_sync.pt.trace.json.gz"],
                         tmp_path_factory.mktemp("cal") / "cnn")


def _json(run: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    assert main(["report", str(run), "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_json_carries_the_calibration(cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _json(cnn_run, capsys)
    assert plain["step_model"]["calibration"] is None
    estimated = plain["plan"]["baseline_ms"]
    given = round(estimated * 1.25, 2)
    rep = _json(cnn_run, capsys, "--untraced-step-ms", str(given))
    c = rep["step_model"]["calibration"]
    # a GPU-bound conv net: the GPU side is the one that reaches the step with the least change
    assert c["reached"] and c["untraced_step_ms"] == given and c["source"] == "given"
    assert c["scaled"] == "gpu" and c["factor"] > 1.0
    assert c["estimated_ms"] == pytest.approx(estimated, abs=1e-3)
    assert c["min_ms"] < given < c["max_ms"]
    assert rep["plan"]["baseline_ms"] == pytest.approx(given, rel=0.003)
    assert all(r["baseline_ms"] == pytest.approx(given, rel=0.003) for r in rep["remedies"])
    # the findings are the diagnosis: the calibration does not touch them
    assert [f["est_saving_ms"] for f in rep["findings"]] == \
        [f["est_saving_ms"] for f in plain["findings"]]


def test_terminal_says_the_plan_starts_from_the_given_step(
        cnn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a GPU-bound conv net: 12.6 ms traced, ~11.6 ms estimated without the profiler
    assert main(["report", str(cnn_run), "--untraced-step-ms", "13"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "from 13.00 ms (the untraced step given; 12.63 ms as traced, the GPU's time x1." in out
    assert main(["report", str(cnn_run), "--untraced-step-ms", "0.01"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Not calibrated: the untraced step given (0.01 ms) is out of the step model's reach" \
        in out


@pytest.mark.parametrize("value", ["0", "-3", "abc", "nan", "inf"])
def test_a_value_that_is_not_a_step_time_is_refused(
        cnn_run: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert main(["report", str(cnn_run), f"--untraced-step-ms={value}"]) == 2
    err = capsys.readouterr().err
    assert "not a step time in ms" in err and "Traceback" not in err


def test_steps_not_marked_by_the_program_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a trace without ProfilerStep ranges nor step-like annotations: its steps are periods of
    # the kernel stream, not the program's
    run = import_traces([DATA / "critical_path_alexnet_benchmark_result_2869224_1695835535_"
                                "trace.json.gz"], tmp_path / "run")
    assert main(["report", str(run), "--untraced-step-ms", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stepscope: error: ")
    assert "--untraced-step-ms needs the program's steps" in err[0] and str(run) in err[0]
    assert "recovered from the periodicity of the kernel stream" in err[0]


def test_markdown_and_html_say_the_plan_starts_from_the_given_step(
        cnn_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(cnn_run), "--untraced-step-ms", "13", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "from 13.00 ms (the untraced step given)" in md
    assert "**Best pair:** bf16\\_amp + cuda\\_graphs together" in md  # a plan of 5 remedies
    assert main(["report", str(cnn_run), "--untraced-step-ms", "0.01", "--format",
                 "markdown"]) == 0
    assert "Not calibrated: the untraced step given (0.01 ms)" in capsys.readouterr().out
    page = tmp_path / "r.html"
    assert main(["report", str(cnn_run), "--untraced-step-ms", "13", "-o", str(page)]) == 0
    html = page.read_text()
    assert '"calibration":{"rank":0,"source":"given","untraced_step_ms":13.0,"reached":true' in html \
        and "' (the untraced step ' + cal.source + ')'" in html  # the page's script says it
