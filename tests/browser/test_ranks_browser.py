"""The HTML ranks section of a multi-rank run in headless Chromium: the step x rank wait heat
map marks the late rank, and the collectives table lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.test_report_browser import _report, browser, load, pytestmark  # noqa: F401
from tests.model.test_collectives import straggler

from builder import TraceBuilder


def test_heat_map_and_collectives(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    b = TraceBuilder()
    straggler(b)
    run = b.build(tmp_path / "run")
    r = load(browser, _report(run, tmp_path / "run.html"))
    assert r.errors() == []
    cells = r.page.locator("#ranks .heat .cell")
    n = cells.count()
    assert n > 0 and n % 2 == 0  # steps x 2 ranks
    marks = [cells.nth(i).inner_text() for i in range(n)]
    assert marks[1::2] == ["●"] * (n // 2) and marks[0::2] == [""] * (n // 2)  # rank 1 late
    assert "rank 0: waited 400.0 µs" in (cells.nth(0).get_attribute("title") or "")
    text = r.page.locator("#ranks").inner_text()
    assert "Collectives by kind" in text and "all_reduce" in text
    r.page.close()


def test_shared_axis_clock_offsets_and_folded_ranks(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from tests.reporters.test_timeline_clocks import shifted

    run = shifted(tmp_path / "two", 5000)
    r = load(browser, _report(run, tmp_path / "two.html"))
    assert r.errors() == []
    head = r.page.locator("#clock-offsets")
    assert "clocks aligned: rank 1 −5.000 ms" in head.inner_text()
    assert "ran on 2 hosts" in (head.get_attribute("title") or "")
    t = "window.__stepscope.timeline"
    assert r.page.evaluate(f"{t}.closedRanks.size") == 0
    r.page.close()
    # 10 ranks: the groups beyond the first 8 start folded to their header row
    run = shifted(tmp_path / "ten", 5000, ranks=10)
    r = load(browser, _report(run, tmp_path / "ten.html"))
    assert r.errors() == []
    tracks_of = f"(k => {t}.rows.filter(x => x.kind === 'track' && x.t.rank === k).length)"
    assert r.page.evaluate(f"[...{t}.closedRanks].sort((a, b) => a - b)") == [8, 9]
    assert r.page.evaluate(f"{t}.rows.filter(x => x.kind === 'rank').length") == 10
    assert r.page.evaluate(f"{tracks_of}(9)") == 0 and r.page.evaluate(f"{tracks_of}(7)") > 0
    r.page.evaluate(f"{t}.toggleRank(9)")
    assert r.page.evaluate(f"{tracks_of}(9)") > 0
    assert r.errors() == []
    r.page.close()
