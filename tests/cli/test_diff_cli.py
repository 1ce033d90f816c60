"""``stepscope diff``: exit codes (the CI gate), formats, escaping, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from builder import TraceBuilder
from compare.runs import JITTER, planted
from stepscope.cli.main import main

HOSTILE = "[bold red]boom[/bold red]<script>alert(1)</script>"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli_diff")
    out = {}
    # steps 1000 + j µs; "slow": 1100 + j (10% slower); "slight": 1010 + j (1% slower)
    for name, tail in (("base", 50), ("slow", 150), ("slight", 60)):
        out[name] = planted(TraceBuilder(), wait=400, triton=50, tail=tail).build(root / name).path
    b = TraceBuilder()
    planted(b, wait=400, triton=50, tail=150, triton_name=HOSTILE)
    out["hostile"] = b.build(root / "hostile").path
    return out


def test_fail_above_is_a_ci_gate(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base, slow, slight = str(runs["base"]), str(runs["slow"]), str(runs["slight"])
    assert main(["diff", base, slow, "--fail-above", "5"]) == 1  # ~10% slower, surely > 5%
    assert main(["diff", base, slow, "--fail-above", "15"]) == 0  # not surely > 15%
    assert main(["diff", base, slight, "--fail-above", "5"]) == 0  # 1% slower
    assert main(["diff", slow, base, "--fail-above", "0"]) == 0  # faster never fails
    assert main(["diff", base, slow]) == 0  # no gate, no failure
    capsys.readouterr()


def test_json_contract(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(runs["base"]), str(runs["slow"]), "--format", "json",
                 "--fail-above", "5"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "stepscope.diff/1" and d["verdict"] == "slower"
    assert {"verdict", "step_ms", "categories", "kernels", "findings", "ops", "alignment",
            "test", "base", "new", "ranks", "fail_above"} <= set(d)
    s = d["step_ms"]
    assert s["base"] == pytest.approx(1.0045) and s["new"] == pytest.approx(1.1045)
    assert s["change_pct"] == pytest.approx(100 * 0.1 / 1.0045, rel=1e-3)
    lo, hi = s["interval"]
    assert 0 < lo < s["change_pct"] < hi
    assert list(d["categories"])[0] == "idle"
    assert d["categories"]["idle"]["delta_ms"] == pytest.approx(0.1)
    assert set(d["kernels"]) == {"matched", "new", "gone", "counts"}
    assert d["kernels"]["counts"] == {"matched": 2, "new": 0, "gone": 0}
    assert d["fail_above"] == {"pct": 5.0, "failed": True}
    assert set(d["findings"]) == {"appeared", "gone", "changed", "unchanged"}


def test_several_runs_per_side(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--base", str(runs["base"]), str(runs["slight"]), "--new",
                 str(runs["slow"]), str(runs["hostile"]), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [len(d["base"]), len(d["new"])] == [2, 2]
    assert d["step_ms"]["base_steps"] == d["step_ms"]["new_steps"] == 2 * len(JITTER)
    assert d["verdict"] == "slower"


def test_terminal_shows_names_as_text(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(runs["base"]), str(runs["hostile"])]) == 0
    out = capsys.readouterr().out
    assert "SLOWER" in out
    assert "[bold red]boom" in out  # markup in a name is printed, not interpreted
    assert "triton_poi_fused_add_0" in out and "gone" in out


def test_html_is_escaped_and_self_contained(runs: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "diff.html"
    assert main(["diff", str(runs["base"]), str(runs["hostile"]), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "SLOWER" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "script-src 'none'" in page and "http" not in page.replace("http-equiv", "")
    blob = re.search(r'<script type="application/json" id="stepscope-diff">(.*?)</script>',
                     page, re.S)
    assert blob is not None and json.loads(blob.group(1))["verdict"] == "slower"
    assert "\\u003cscript\\u003e" in blob.group(1)


def test_text_to_a_file(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "diff.txt"
    assert main(["diff", str(runs["base"]), str(runs["base"]), "-o", str(out)]) == 0
    assert "SAME" in out.read_text()
    capsys.readouterr()


@pytest.mark.parametrize("args,message", [
    (["one"], "diff takes two runs, BASE and NEW (1 given)"),
    (["a", "b", "c"], "diff takes two runs, BASE and NEW (3 given)"),
    (["--base", "a"], "--base and --new go together"),
    (["a", "b", "--base", "c", "--new", "d"], "give BASE NEW, or --base and --new, not both"),
])
def test_bad_shapes_are_one_line(args: list[str], message: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"stepscope: error: {message}"


def test_a_missing_run_is_one_line(runs: dict[str, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(tmp_path / "nope"), str(runs["base"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: ") and err.count("\n") == 1 and "nope" in err
    assert main(["diff", str(runs["base"]), str(runs["base"]), "--fail-above", "x"]) == 2
