"""report --open: the HTML report written, then opened in a browser where there is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.cli.main import main
from stepscope.cli.report import open_in_browser

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"


def test_headless_starts_nothing(tmp_path: Path) -> None:
    calls: list[str] = []
    page = tmp_path / "r.html"
    said = open_in_browser(page, {"TERM": "xterm"}, "linux", lambda u: calls.append(u) or True)
    assert calls == [] and said == f"no display to open a browser on; the report is {page}"


@pytest.mark.parametrize(("env", "platform"), [({"DISPLAY": ":0"}, "linux"),
                                               ({"WAYLAND_DISPLAY": "w"}, "linux"),
                                               ({"BROWSER": "firefox"}, "linux"),
                                               ({}, "darwin"), ({}, "win32")])
def test_a_browser_is_asked_where_there_may_be_one(tmp_path: Path, env: dict[str, str],
                                                   platform: str) -> None:
    calls: list[str] = []
    page = tmp_path / "r.html"
    assert open_in_browser(page, env, platform, lambda u: calls.append(u) or True) is None
    assert calls == [page.resolve().as_uri()]
    assert open_in_browser(page, env, platform, lambda u: False) == (
        f"found no browser to open; the report is {page}")

    def broken(uri: str) -> bool:
        raise OSError("no such file: xdg-open")

    assert open_in_browser(page, env, platform, broken) == (
        f"could not open a browser (no such file: xdg-open); the report is {page}")


def test_report_open_writes_the_html_and_says_where(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "cnn"
    assert main(["import", str(CNN), "-o", str(run)]) == 0
    capsys.readouterr()
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert main(["report", str(run), "--open"]) == 0
    out, err = capsys.readouterr()
    assert out == f"wrote {run / 'report.html'}\n"
    assert err == f"stepscope: no display to open a browser on; the report is {run / 'report.html'}\n"
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    opened: list[str] = []
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr("webbrowser.open", lambda uri: opened.append(uri) or True)
    assert main(["report", str(run), "-o", str(tmp_path / "x.html"), "--open"]) == 0
    assert opened == [(tmp_path / "x.html").resolve().as_uri()] and capsys.readouterr().err == ""
    assert main(["report", str(run), "--open", "--format", "json"]) == 2
    assert "--open opens the HTML report (not --format json" in capsys.readouterr().err
