"""Progress bars of ``stepscope import`` and ``stepscope report``: on a terminal only, never with
``--quiet``, and only for work that runs past ``PROGRESS_AFTER_S`` (cli/progress.py)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from stepscope.cli import import_ as import_cli
from stepscope.cli import progress as progress_cli
from stepscope.cli import report as report_cli
from stepscope.cli.main import main
from stepscope.cli.progress import TerminalProgress
from stepscope.progress import report, reporting

FIXTURE = Path(__file__).parents[2] / "src" / "stepscope" / "data" / "cnn_fp32_sync.pt.trace.json.gz"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_report_reaches_the_sink_set_and_nothing_else() -> None:
    heard: list[tuple[str, float, float]] = []
    report("nobody listens", 1, 2)  # no sink: a no-op
    with reporting(lambda *a: heard.append(a)):
        report("reading", 1, 2)
        with reporting(None):
            report("hidden", 1, 1)
    report("after", 2, 2)
    assert heard == [("reading", 1, 2)]


def test_the_bar_waits_for_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(progress_cli.time, "monotonic", lambda: now[0])
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with TerminalProgress(True, delay_s=2.0) as sink:
        assert sink is not None
        sink("reading a.json", 10, 100)  # at once: remembered, not drawn
        assert tty.getvalue() == ""
        now[0] += 2.5
        sink("writing rank 0's tables", 1, 4)  # past the delay: the bar starts with both tasks
    assert "reading a.json" in tty.getvalue()
    assert "writing rank 0's tables" in tty.getvalue()
    quick = Tty()
    monkeypatch.setattr(sys, "stderr", quick)
    with TerminalProgress(True, delay_s=2.0) as sink:
        assert sink is not None
        sink("reading a.json", 100, 100)  # done within the delay: nothing is ever drawn
    assert quick.getvalue() == ""


def test_import_and_report_draw_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setattr(import_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(report_cli, "PROGRESS_AFTER_S", 0.0)
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    run = tmp_path / "run"
    assert main(["import", str(FIXTURE), "-o", str(run)]) == 0
    assert f"reading {FIXTURE.name}" in tty.getvalue()
    assert "writing rank 0's tables" in tty.getvalue()
    tty.truncate(0)
    tty.seek(0)
    assert main(["report", str(run), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert "analysing the run" in tty.getvalue()


@pytest.mark.parametrize("tty", [False, True])
def test_nothing_is_drawn_off_a_terminal_or_with_quiet(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, tty: bool) -> None:
    monkeypatch.setattr(import_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(report_cli, "PROGRESS_AFTER_S", 0.0)
    err = Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    quiet = ["--quiet"] if tty else []
    run = tmp_path / "run"
    assert main(["import", str(FIXTURE), "-o", str(run), *quiet]) == 0
    assert main(["report", str(run), "--format", "json", "-o", str(tmp_path / "r.json"),
                 *quiet]) == 0
    assert err.getvalue() == ""


def test_decompressing_and_exporting_say_how_far(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    # a .json.gz trace is decompressed before it is read, and `export` writes window by window:
    # both tell the sink, which `import` and `export` draw on a terminal
    from stepscope.cli import export as export_cli
    from stepscope.importers.kineto.trace_file import gunzip

    heard: list[tuple[str, float, float]] = []
    raw = FIXTURE.read_bytes()
    with reporting(lambda *a: heard.append(a)):
        gunzip(raw, what="decompressing x")
    assert heard and heard[-1] == ("decompressing x", len(raw), len(raw))
    assert [h[1] for h in heard] == sorted(h[1] for h in heard)  # forwards only
    monkeypatch.setattr(import_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(export_cli, "PROGRESS_AFTER_S", 0.0)
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    run = tmp_path / "run"
    assert main(["import", str(FIXTURE), "-o", str(run)]) == 0
    assert f"decompressing {FIXTURE.name}" in tty.getvalue()
    tty.truncate(0)
    tty.seek(0)
    assert main(["export", str(run), "-o", str(tmp_path / "t.json")]) == 0
    assert "writing the timeline" in tty.getvalue()
    tty.truncate(0)
    tty.seek(0)
    assert main(["export", str(run), "-o", str(tmp_path / "u.json"), "--quiet"]) == 0
    assert tty.getvalue() == ""
