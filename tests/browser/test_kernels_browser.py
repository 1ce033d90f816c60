"""The HTML report's Nsight Compute part in headless Chromium: the roofline chart and the
profiled-kernel table are drawn, with no console errors, and a hostile kernel name stays text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.browser.test_report_browser import (  # noqa: F401
    ARGS,
    ARTIFACTS,
    CHROMIUM,
    load,
    pytestmark,
)
from tests.importers.ncu.synth import raw_csv

from stepscope.importers import import_traces
from stepscope.importers.ncu import attach_profiles, import_profiles
from stepscope.reporters.html import to_html
from stepscope.reporters.report import build_report
from stepscope.store.run import Run

DATA = Path(__file__).parents[1] / "data"
HOSTILE = "<img src=x onerror=window.__pwned=7>gemm_sgemm"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _html(run: Path, out: Path) -> Path:
    out.write_text(to_html(build_report(Run(run), page=True)), encoding="utf-8")
    return out


def test_roofline_and_table(browser: Any, tmp_path: Path) -> None:
    planted = _html(import_profiles([DATA / "ncu" / "planted.raw.csv",
                                     DATA / "ncu" / "planted.source.csv"], tmp_path / "p"),
                    tmp_path / "p.html")
    page = load(browser, planted)
    assert page.errors() == []
    # kernels with floating-point work sit on the chart: tail_wave x2, strided x2, regs_chase
    # x2, regs_lines x2
    assert page.page.locator("#kernels svg.roofline circle.pt").count() == 8
    assert page.page.locator("#kernels svg.roofline .roof").count() == 2
    assert page.page.locator("#kernels h3").first.text_content() == (
        "Inside the kernels (Nsight Compute)")
    text = page.page.locator("#kernels").text_content() or ""
    assert "planted_narrow_load" in text and "Hot source lines (warp-stall samples)" in text
    assert page.page.locator("#kernels ul.hotlines").count() == 12  # one per profiled kernel
    assert "−75% of the kernel" in (page.page.locator("#findings").text_content() or "")
    page.page.locator("#kernels").scroll_into_view_if_needed()
    page.page.locator("#kernels").screenshot(path=str(ARTIFACTS / "kernels-roofline.png"))


def test_a_hostile_kernel_name_stays_text(browser: Any, tmp_path: Path) -> None:
    units = {"gpu__time_duration.sum": "us", "sm__throughput.avg.pct_of_peak_sustained_elapsed":
             "%", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst",
             "dram__bytes_read.sum": "Mbyte"}
    f = tmp_path / "h.csv"
    f.write_text(raw_csv([{"Kernel Name": HOSTILE, "gpu__time_duration.sum": "700",
                           "sm__throughput.avg.pct_of_peak_sustained_elapsed": "90",
                           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "1e10",
                           "dram__bytes_read.sum": "10"}], units))
    run = import_traces([DATA / "cnn_fp32_sync.pt.trace.json.gz"], tmp_path / "r")
    attach_profiles([f], run)
    page = load(browser, _html(run, tmp_path / "h.html"))
    assert page.errors() == []
    assert page.page.evaluate("() => window.__pwned") is None
    assert HOSTILE in (page.page.locator("#kernels").text_content() or "")
