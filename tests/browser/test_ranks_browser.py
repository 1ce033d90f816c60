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
