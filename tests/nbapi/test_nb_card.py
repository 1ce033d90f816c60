"""The notebook card (``Profile._repr_html_``, ``reporters.notebook_html``): the overview and
the findings, names escaped."""

from __future__ import annotations

import re
from pathlib import Path

import stepscope
from builder import TraceBuilder
from stepscope.analysis.summary import summarize


def test_card_shows_the_overview_and_findings_escaped(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(6):
        t = i * 100
        b.step(t, 100)
        b.kernel("<img src=x onerror=alert(1)>", ts=t + 10, dur=60, grid=(16, 1, 1),
                 block=(128, 1, 1), launch=(t + 2, 5))
    b.build(tmp_path / "r<b>un")
    p = stepscope.load(tmp_path / "r<b>un")
    card = p._repr_html_()
    rep = p.analyze()
    s = summarize(rep.analysis)
    assert "<img" not in card and "<b>un" not in card and "<script" not in card
    assert "&lt;img src=x onerror=alert(1)&gt;" in card  # the kernel, named in a finding
    assert "r&lt;b&gt;un" in card
    assert f"{s.steps} steps" in card and f"step {s.step_time.mean_ms:.2f} ms" in card
    ids = re.findall(r"<code>([a-z_]+)</code>", card)
    assert ids == [f.id for f in rep.advice.findings][:10] and "small_grid" in ids
    widths = [float(w) for w in re.findall(r"width:([0-9.]+)%", card)]
    assert sum(widths) == __import__("pytest").approx(100, abs=0.01)  # the bar fills the card


def test_card_of_an_imported_trace_says_where_it_went(tmp_path: Path) -> None:
    import shutil

    trace = tmp_path / "cnn.pt.trace.json.gz"
    shutil.copy(Path(__file__).parent.parent / "data" / "cnn_fp32_sync.pt.trace.json.gz", trace)
    card = stepscope.load(trace)._repr_html_()
    assert "imported from" in card and str(tmp_path / "cnn.stepscope") in card
