"""The HTML overview in headless Chromium: the cards say how steps were found, GPU busy per rank
over the GPUs used (or that there was no GPU work), and how the program ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.test_report_browser import _report, browser, load, pytestmark  # noqa: F401

from builder import TraceBuilder
from stepscope.store.manifest import Diagnostic, SourceInfo


def _cards(b: Any, run: Any, out: Path) -> tuple[dict[str, str], str, Any]:
    r = load(b, _report(run, out))
    assert r.errors() == []
    cards = {}
    for c in r.page.locator("#cards .card").all():
        cards[c.locator(".k").inner_text()] = c.inner_text()
    return cards, r.page.locator("#overview .runline").inner_text(), r


def test_cpu_only_run(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    b = TraceBuilder()
    for i in range(4):
        b.step(i * 10_000, 10_000, source="hook").input_wait(i * 10_000, 9_700)
    settings = {"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "stopped"},
                                    "window_start_ns": 0, "window_end_ns": None}}}
    run = b.build(tmp_path / "cpu", devices=0, settings=settings, partial=True,
                  diagnostics=(Diagnostic("warning", "process_ended",
                                          "rank 0 (pid 7) ended by signal: SIGKILL"),),
                  source=SourceInfo(kind="capture", details={"returncode": -9}))
    cards, runline, r = _cards(browser, run, tmp_path / "cpu.html")
    assert "none recorded" in cards["GPU busy"]
    assert "recorded no GPU work" in cards["GPU busy"]
    assert "4 steady · from a step hook" in cards["Steps"]
    assert ("PARTIAL: the program was killed by SIGKILL before the capture window closed"
            in runline)
    heading = r.page.locator("#overview h3").first.inner_text()
    assert heading.endswith(": all host time, no GPU activity recorded")
    legends = r.page.locator("#overview .legend").all_inner_texts()  # the bar's, the chart's
    assert len(legends) == 2
    assert all("host, nothing recorded" in t and "idle (unattributed)" not in t for t in legends)
    r.page.close()


def test_two_ranks_and_eight_listed_gpus(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    # rank 0: 1.4 of 2.0 ms on device 3 of 8 (70%); rank 1: 2.0 of 4.0 ms (50%); 56.7% pooled
    b = TraceBuilder()
    for i in range(2):
        b.step(i * 1000, 1000, rank=0)
        b.step(i * 2000, 2000, rank=1)
    b.kernel("k", 0, 800, device=3, rank=0).kernel("k", 1000, 600, device=3, rank=0)
    b.kernel("k", 0, 1000, rank=1).kernel("k", 2000, 1000, rank=1)
    run = b.build(tmp_path / "two", devices=8,
                  source=SourceInfo(kind="capture", details={"returncode": 3}), partial=True)
    cards, runline, r = _cards(browser, run, tmp_path / "two.html")
    assert "56.7%" in cards["GPU busy"] and "rank 0 70.0% · rank 1 50.0%" in cards["GPU busy"]
    assert "the program exited with status 3" in runline and "PARTIAL" not in runline
    assert "from the trace's ProfilerStep markers" in cards["Steps"]
    r.page.close()


def test_input_pipeline_card(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    # 1 ms steps, 300 µs of input wait each with the GPU idle, then a kernel: 30% -> highly
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(t, 1000, step=i).input_wait(t, 300).kernel("k", t + 310, 100)
    cards, _, r = _cards(browser, b.build(tmp_path / "in"), tmp_path / "in.html")
    assert "highly input-bound" in cards["Input pipeline"]
    assert "30.0% of the step waiting for input" in cards["Input pipeline"]
    r.page.close()
    plain = TraceBuilder().step(0, 1000).kernel("k", 10, 100)  # no input waits: no card
    cards, _, r = _cards(browser, plain.build(tmp_path / "plain"), tmp_path / "plain.html")
    assert "Input pipeline" not in cards
    r.page.close()
