"""report --format markdown: the tables, and names from traces shown as text, never as syntax."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from builder import TraceBuilder
from stepscope.cli.main import main
from stepscope.reporters.markdown import escape, to_markdown
from stepscope.reporters.report import build_report

HOSTILE = "<img src=x onerror=alert(1)>a|b *c* _d_ `e` [f](http://x) @octocat #12 &amp;\\~g~"


def hostile_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(t, 1000, step=i)
        b.kernel(HOSTILE, t + 10, 900, launch=(t + 1, 5))
    return b.build(tmp_path / "run")


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_the_tables_hold_the_runs_figures(tmp_path: Path) -> None:
    md = to_markdown(build_report(hostile_run(tmp_path)))
    lines = md.splitlines()
    assert lines[0] == "## stepscope: run"
    overview = dict(_cells(r)[:2] for r in lines if r.startswith("| **"))
    # 3 steps of 1000 us, each with one 900 us kernel
    assert overview["**Step time**"].startswith("**1.00 ms** median, 1.00 mean")
    assert overview["**GPU busy**"] == "**90.0%** of step time"
    assert overview["**Kernels**"] == "3 (2.7 ms)"
    kernels = lines[lines.index("### Top kernels (steady-state steps)") + 4]
    assert _cells(kernels)[1:] == ["3", "2.70", "100%"]
    assert md.endswith("</sub>\n")


def test_names_are_text_not_markdown_or_html(tmp_path: Path) -> None:
    assert len(HOSTILE) <= 80  # shown whole (MAX_NAME)
    md = to_markdown(build_report(hostile_run(tmp_path)))
    page = _html(md)
    assert "<img" not in page and "<a " not in page and "<em>" not in page
    assert "<code>" not in page and "<del>" not in page
    assert "@octocat" not in md and "#12" not in md  # no mention, no issue link in a comment
    # the kernel's table row has its four cells, and the name reads back exactly
    row = next(r for r in page.split("<tr>") if "onerror" in r)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert len(cells) == 4
    assert html.unescape(cells[0]) == HOSTILE


@pytest.mark.parametrize(("text", "limit", "want"), [
    ("plain name", None, "plain name"),
    ("a|b", None, "a\\|b"),
    ("<b>&", None, "&lt;b&gt;&amp;"),
    ("line\nbreak\x1b[31m", None, "line break\\\\x1b\\[31m"),
    ("abcdefghij", 5, "abcd…"),
    ("@me #1", None, "&#64;me &#35;1"),
])
def test_escape(text: str, limit: int | None, want: str) -> None:
    assert escape(text, limit) == want


def test_report_format_markdown_and_md_suffix(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = hostile_run(tmp_path)
    assert main(["report", str(run.path), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out == to_markdown(build_report(run))
    target = tmp_path / "summary.md"
    assert main(["report", str(run.path), "-o", str(target)]) == 0
    assert target.read_text() == out


def test_remedies_and_the_plan_when_the_advice_has_them(tmp_path: Path) -> None:
    # the step model's remedies (advice.remedies: .remedies by saving, .plan) read by name;
    # stand-ins with their fields, hand-made numbers
    import dataclasses
    from types import SimpleNamespace as NS

    rep = build_report(hostile_run(tmp_path))
    assert "### Remedies" not in to_markdown(rep)  # no remedies: no section
    first = rep.advice.findings[0].id
    remedies = NS(remedies=[
        NS(rank=0, title="pin host memory <b>", option="pin", options=("pin",),
           predicted_step_ms=0.8, est_saving_ms=0.2, est_saving_pct=20.0, finding_ids=(first,)),
        NS(rank=0, title="remove syncs (all)", option="every 10 steps",
           options=("all", "every 10 steps"), predicted_step_ms=0.9, est_saving_ms=0.1,
           est_saving_pct=10.0, finding_ids=())],
        plan=NS(remedy_ids=("pin_memory", "remove_syncs"), predicted_step_ms=0.7,
                measured_ms=1.1, baseline_ms=1.0, est_saving_pct=30.0))
    advice = NS(findings=rep.advice.findings, host_trust=rep.advice.host_trust,
                remedies=remedies)
    md = to_markdown(dataclasses.replace(rep, advice=advice))
    lines = md.splitlines()
    at = lines.index("### Remedies (each replayed on the step model of rank 0; savings do not "
                     "add up)")
    assert _cells(lines[at + 4]) == ["1", "pin host memory &lt;b&gt;", "0.80 ms",
                                     "**0.20 ms** (20%)"]
    assert _cells(lines[at + 5]) == ["2", "remove syncs (all) (every 10 steps)", "0.90 ms",
                                     "**0.10 ms** (10%)"]
    # beside the finding a remedy answers: that remedy's replayed saving (escaped, short title)
    row = next(x for x in lines if x.startswith("| 1 |"))
    assert "; as a fix, replayed: pin host memory &lt;b&gt; **0.20 ms** (20%)" in row
    assert not any("remove syncs **" in x for x in lines)
    assert ("**Plan:** pin\\_memory + remove\\_syncs together: 0.70 ms per step from 1.00 ms "
            "(save 30%)") in lines
    # a plan of one remedy is that remedy, not "together"
    one = NS(remedies=remedies.remedies,
             plan=NS(remedy_ids=("pin_memory",), predicted_step_ms=0.8, measured_ms=1.0,
                     baseline_ms=1.0, est_saving_pct=20.0))
    md1 = to_markdown(dataclasses.replace(rep, advice=NS(findings=rep.advice.findings,
                                                         host_trust=rep.advice.host_trust,
                                                         remedies=one)))
    assert "**Plan:** pin\\_memory: 0.80 ms per step from 1.00 ms (save 20%)" in md1.splitlines()
