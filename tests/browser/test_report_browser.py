"""The HTML report in a real headless Chromium: loads without errors, draws, zooms, pans, hovers,
links, and renders hostile trace names as text without running them.

Needs ``playwright`` (the Python package) and a Chromium at ``/usr/bin/chromium`` (CI installs it
with ``.ci/browser-setup.sh``; ``playwright install`` is never used). Screenshots go to
``tests/browser/artifacts/`` (git-ignored).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder import TraceBuilder
from stepscope.importers import import_traces
from stepscope.reporters.html import to_html
from stepscope.reporters.report import build_report
from stepscope.store.run import Run

CHROMIUM = os.environ.get("STEPSCOPE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DATA = Path(__file__).parents[1] / "data"
ARTIFACTS = Path(__file__).parent / "artifacts"
HOSTILE_KERNEL = "</script><script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"
HOSTILE_NVTX = "<b onmouseover=window.__pwned=3>nvtx</b>"
HOSTILE_THREAD = "<img src=x onerror=window.__pwned=4>"
HOSTILE_FRAME = "/w/x.py:1 <script>window.__pwned=5</script>"

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="playwright is not installed (pip install playwright; no browser download needed)"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no Chromium at {CHROMIUM} (run .ci/browser-setup.sh or apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _report(run: Run, out: Path) -> Path:
    out.write_text(to_html(build_report(run, page=True)), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("html")
    out = {}
    for name, files in (("gpt", ["gpt_bf16_adamw.pt.trace.json.gz"]),
                        ("cnn", ["cnn_fp32_sync.pt.trace.json.gz"]),
                        ("tworank", ["trace_filter_sampled_rank-0.json.gz",
                                     "trace_filter_sampled_rank-1.json.gz"]),
                        ("jax", ["xspace/jax_mlp.xplane.pb"]),
                        ("tf", ["xspace/tf_bert_multiworker_v100.xplane.pb.gz"])):
        run_dir = import_traces([DATA / f for f in files], tmp / f"{name}.stepscope")
        out[name] = _report(Run(run_dir), tmp / f"{name}.html")
    b = TraceBuilder()
    b.thread(HOSTILE_THREAD, 100)
    for i in range(4):
        t = i * 1000.0
        b.step(t, 1000, step=i)
        b.nvtx(HOSTILE_NVTX, t + 5, 900)
        b.kernel(HOSTILE_KERNEL, t + 100, 700, launch=(t + 20, 10))
        b.stack(t + 50, ["/w/train.py:3 <module>", HOSTILE_FRAME])
    out["hostile"] = _report(b.build(tmp / "hostile.stepscope"), tmp / "hostile.html")
    from tests.reporters.test_timeline_tracks import recorded_run

    out["recorded"] = _report(recorded_run(tmp / "recorded"), tmp / "recorded.html")
    return out


class Loaded:
    def __init__(self, page: Page, messages: list[str]) -> None:
        self.page = page
        self.messages = messages

    def errors(self) -> list[str]:
        return [m for m in self.messages if m.startswith(("error", "pageerror"))]

    def shot(self, name: str, *, full: bool = False) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full)


def load(browser: Any, path: Path, *, scheme: str = "light") -> Loaded:
    page = browser.new_page(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.goto(path.as_uri())
    page.wait_for_function("() => window.__stepscope && window.__stepscope.ready", timeout=20_000)
    return Loaded(page, messages)


PAINTED = """() => {
  const t = window.__stepscope.timeline, c = t.canvas, d = t.dpr;
  const img = c.getContext('2d').getImageData(Math.round(t.gutter * d), Math.round(t.axisH * d),
      Math.round(t.plotW * d), Math.round((t.H - t.axisH) * d)).data;
  const counts = new Map();
  for (let i = 0; i < img.length; i += 4) {
    const k = (img[i] >> 3) * 1024 + (img[i + 1] >> 3) * 32 + (img[i + 2] >> 3);
    counts.set(k, (counts.get(k) || 0) + 1);
  }
  const top = Math.max(...counts.values());
  return {colors: counts.size, painted: 1 - top / (img.length / 4)};
}"""


def test_remedies_section_shows_the_fit_the_remedies_and_the_plan(
        browser: Any, reports: dict[str, Path]) -> None:
    r = load(browser, reports["cnn"])
    text = r.page.locator("#remedies > .body").inner_text()
    assert r.errors() == []
    assert "Step model: the step replays in" in text
    assert r.page.locator("#remedies .remedy[data-id=tf32]").count() == 1
    assert "Plan: " in text
    # the plan applies more than two remedies: the pair that saves the most (plan.subsets)
    assert r.page.locator("#remedies .plan.pair").count() == 1
    assert "Best pair: " in text and " together: → " in text


@pytest.mark.parametrize("name", ["gpt", "cnn", "tworank", "jax", "tf"])
def test_real_runs_load_with_every_section(browser: Any, reports: dict[str, Path], name: str) -> None:
    r = load(browser, reports[name])
    p = r.page
    assert r.errors() == []
    assert p.evaluate("window.__stepscope.errors") == []
    # the decode timing shown in the header is a real duration (it once read "-78 ms")
    t = p.evaluate("window.__stepscope.timings")
    assert p.evaluate("window.__stepscope.decodeMs") >= 0
    assert min(t["base64"], t["inflate"], t["events"]) >= 0, t
    assert " -" not in p.locator("#status").inner_text()
    for sec in ("overview", "findings", "remedies", "timeline", "kernels", "copies", "syncs",
                "input", "memory", "samples", "ranks"):
        assert p.locator(f"#{sec} > .body").inner_text().strip(), sec
    # the input-pipeline card where the run recorded input waits (TF's tf.data, DataLoader)
    verdict = p.locator("#cards .card", has_text="Input pipeline").count()
    assert p.locator("#cards .card").count() == 8 + verdict
    if name == "tf":
        assert verdict == 1 and "moderately input-bound" in p.locator(
            "#cards .card", has_text="Input pipeline").inner_text()
    if name in ("jax", "tf"):  # the fix tab shown first is the program's framework
        want = {"jax": "jax", "tf": "tensorflow"}[name]
        on = p.locator("#findings .tabs button.on")
        assert on.count() > 0
        assert set(on.evaluate_all("bs => bs.map(b => b.dataset.fw)")) == {want}
    assert p.locator("#step-chart svg rect").count() > 3
    assert p.locator("#kernels tbody tr").count() > 5
    paint = p.evaluate(PAINTED)
    assert paint["colors"] > 8 and paint["painted"] > 0.02, paint  # the timeline is not blank
    r.shot(f"{name}-top")
    p.evaluate("document.getElementById('timeline').scrollIntoView()")
    r.shot(f"{name}-timeline")
    if name == "tworank":
        assert p.evaluate("window.__stepscope.timeline.rows.filter(r => r.kind === 'rank').length") == 2
        assert p.locator("#ranks tbody tr").count() == 2
    p.close()


def test_zoom_pan_hover_click_and_links(browser: Any, reports: dict[str, Path]) -> None:
    r = load(browser, reports["gpt"])
    p = r.page
    p.evaluate("document.getElementById('timeline').scrollIntoView()")
    box = p.locator("#tl-canvas").bounding_box()
    assert box is not None
    view = "(() => { const v = window.__stepscope.timeline.view; return [v.s, v.e]; })()"
    s0, e0 = p.evaluate(view)
    cx, cy = box["x"] + 220 + (box["width"] - 220) / 2, box["y"] + 60
    p.mouse.move(cx, cy)
    for _ in range(6):
        p.mouse.wheel(0, -240)  # zoom in around the cursor
    p.wait_for_timeout(100)
    s1, e1 = p.evaluate(view)
    assert (e1 - s1) < 0.5 * (e0 - s0)
    p.mouse.move(cx, cy)
    p.mouse.down()
    p.mouse.move(cx - 300, cy, steps=5)  # drag left: the view moves later in time
    p.mouse.up()
    p.wait_for_timeout(100)
    s2, e2 = p.evaluate(view)
    assert s2 > s1 and abs((e2 - s2) - (e1 - s1)) < 1e-6 * (e1 - s1) + 1e-9
    # zoom to a 2 ms window and hover a kernel: the tooltip names it
    p.evaluate("(() => { const t = window.__stepscope.timeline; const s = t.ev.endUs * 0.3;"
               " t.view = {s, e: s + 2000}; t.draw(); })()")
    hit = p.evaluate("window.__stepscope.timeline.locate('kernel')")
    assert hit is not None
    p.mouse.move(hit["x"], hit["y"])
    p.wait_for_timeout(50)
    assert p.locator("#tip").is_visible()
    assert hit["name"][:60] in p.locator("#tip").inner_text()
    p.mouse.click(hit["x"], hit["y"])
    details = p.locator("#tl-details").inner_text()
    assert "grid" in details and "theoretical occupancy" in details and "launched by" in details
    p.locator("#tl-details button.link").first.click()  # to the launching API call
    assert "cudaLaunch" in p.locator("#tl-details .name").inner_text()
    assert "GPU work" in p.locator("#tl-details").inner_text()
    r.shot("gpt-timeline-details")
    # shift-drag measures a range
    p.evaluate("document.getElementById('timeline').scrollIntoView()")
    box = p.locator("#tl-canvas").bounding_box()
    assert box is not None
    cx, cy = box["x"] + 220 + (box["width"] - 220) / 2, box["y"] + 60
    p.keyboard.down("Shift")
    p.mouse.move(cx - 200, cy)
    p.mouse.down()
    p.mouse.move(cx + 100, cy, steps=4)
    p.mouse.up()
    p.keyboard.up("Shift")
    p.wait_for_function("() => document.getElementById('tl-info').innerText.includes('selection')",
                        timeout=2000)
    sel = p.evaluate("window.__stepscope.timeline.sel")
    assert sel is not None and sel[1] > sel[0]
    # a finding's link opens the timeline on its range
    p.locator("#findings button[data-finding]").first.click()
    p.wait_for_timeout(100)
    band, v = p.evaluate("[window.__stepscope.timeline.band, window.__stepscope.timeline.view]")
    assert band is not None and v["s"] <= band[0] and v["e"] >= band[1]
    frames = p.evaluate("window.__stepscope.timeline.frames")
    assert len(frames) > 5
    assert r.errors() == []
    p.close()


def test_hostile_names_render_as_text_and_run_nothing(browser: Any, reports: dict[str, Path]) -> None:
    r = load(browser, reports["hostile"])
    p = r.page
    assert p.evaluate("typeof window.__pwned") == "undefined"
    assert p.locator("img").count() == 0 and p.locator("#kernels b").count() == 0
    assert HOSTILE_KERNEL in p.locator("#kernels tbody").inner_text()
    p.evaluate("document.getElementById('timeline').scrollIntoView()")
    p.evaluate("(() => { const t = window.__stepscope.timeline; t.view = {s: 0, e: 1200}; t.draw(); })()")
    hit = p.evaluate("window.__stepscope.timeline.locate('kernel')")
    assert hit is not None and hit["name"] == HOSTILE_KERNEL
    p.mouse.move(hit["x"], hit["y"])
    assert HOSTILE_KERNEL in p.locator("#tip").inner_text()
    p.mouse.click(hit["x"], hit["y"])
    assert p.locator("#tl-details .name").inner_text() == HOSTILE_KERNEL
    p.locator("#timeline input[type=search]").fill("<b onmouseover")
    assert "4 matching" in p.locator("#timeline").inner_text()
    p.locator("#timeline input[type=search]").fill("")
    hit = p.evaluate("window.__stepscope.timeline.locate('stack')")  # a sampled stack's leaf
    assert hit is not None and hit["name"].startswith("<script>window.__pwned=5</script>")
    p.mouse.move(hit["x"], hit["y"])
    assert HOSTILE_FRAME in p.locator("#tip").inner_text()
    p.mouse.click(hit["x"], hit["y"])
    details = p.locator("#tl-details").inner_text()
    assert HOSTILE_FRAME in details and f"{HOSTILE_THREAD} · sampled stacks" in details
    assert p.evaluate("typeof window.__pwned") == "undefined"
    assert r.errors() == []  # no CSP violation either
    r.shot("hostile-timeline")
    p.close()


def test_dark_scheme(browser: Any, reports: dict[str, Path]) -> None:
    r = load(browser, reports["cnn"], scheme="dark")
    bg = r.page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(15, 18, 22)"
    assert r.page.evaluate(PAINTED)["painted"] > 0.02
    r.shot("cnn-dark", full=True)
    assert r.errors() == []
    r.page.close()


def overhead_card(browser: Any, run: Any, out: Path) -> str:
    """The text of the report's *Capture overhead* card (no page errors)."""
    r = load(browser, _report(run, out))
    assert r.errors() == []
    card: str = r.page.locator("#cards .card", has_text="Capture overhead").inner_text()
    r.page.close()
    return card


def test_captured_run_shows_its_capture_overhead(browser: Any, tmp_path: Path) -> None:
    """A run made by `stepscope record` carries what each process measured of itself
    (manifest.overhead["rank0"]): the overview card shows it, not just 'measured'."""
    from tests.capture.test_bootstrap import captured_run

    card = overhead_card(browser, captured_run(tmp_path), tmp_path / "captured.html")
    # no steps after the window: not measured (the steps before it are warm-up, never the
    # reference)
    assert "not measured" in card and "fewer than 3 steps ran after the window" in card, card
    assert "before it" not in card and "x1.00" not in card, card


def test_captured_run_with_steps_after_the_window(browser: Any, tmp_path: Path) -> None:
    """With steps timed after the window (CUPTI detached, samplers off), the card says so."""
    from tests.capture.test_bootstrap import captured_run

    card = overhead_card(browser, captured_run(tmp_path, n=25), tmp_path / "captured-after.html")
    assert "x1.00 (90% CI 1.00–1.00)" in card and "the steps right after it" in card, card


def test_captured_run_whose_program_changed_speed(browser: Any, tmp_path: Path) -> None:
    """Steps before and after the window that differ: the card says the cost is not measurable
    instead of showing the ratio as the capture's cost."""
    from tests.reporters.test_capture_summary import changed_speed_run

    card = overhead_card(browser, changed_speed_run(tmp_path), tmp_path / "captured-changed.html")
    assert "not measurable" in card and "differ by x2.50" in card and "x2.50 (" not in card, card


ROWS = """() => window.__stepscope.timeline.rows.filter(r => r.t).map(r => r.t.label)"""
ROW_AT = """(label) => {
  const t = window.__stepscope.timeline, r = t.canvas.getBoundingClientRect();
  const row = t.rows.find(x => x.t && x.t.label === label);
  return {x: r.left + 40, y: r.top + t.axisH - t.scrollY + row.y + 10};
}"""


def test_recorded_run_shows_threads_under_the_gpu_and_folds_samples(
        browser: Any, reports: dict[str, Path]) -> None:
    r = load(browser, reports["recorded"])
    p = r.page
    p.evaluate("document.getElementById('timeline').scrollIntoView()")
    first = ["Steps", "GPU 0 · stream 7", "MainThread", "MainThread · sampled stacks",
             "pt_autograd_0", "thread 4400", "DataLoader worker 0", "CPU (all cores)",
             "process.cpu_pct", "process.rss_bytes", "GPU 0 (NVML)", "Disk and network"]
    assert p.evaluate(ROWS) == first  # 16 per-core lanes folded into one
    r.shot("recorded-timeline")
    pos = p.evaluate(ROW_AT, "CPU (all cores)")
    p.mouse.move(pos["x"] + 400, pos["y"])  # the summary's tooltip says it expands
    assert "click to show the 16 lanes" in p.locator("#tip").inner_text()
    p.mouse.click(pos["x"], pos["y"])  # a click on the summary's label expands it
    cores = [f"cpu.core{c}.util_pct" for c in range(16)]
    assert p.evaluate(ROWS) == first[:8] + cores + first[8:]
    r.shot("recorded-expanded")
    p.mouse.click(pos["x"], pos["y"])  # and folds it again
    assert p.evaluate(ROWS) == first
    # a sampled stack: the leaf in the lane, the whole stack in the tooltip and the details
    p.evaluate("(() => { const t = window.__stepscope.timeline; t.view = {s: 0, e: 1000}; t.draw(); })()")
    hit = p.evaluate("window.__stepscope.timeline.locate('stack')")
    assert hit is not None and hit["name"] == "_call_impl (module.py:1736)"
    p.mouse.move(hit["x"], hit["y"])
    tip = p.locator("#tip").inner_text()
    assert "2 samples in a row" in tip and "/w/train.py:12 train_step" in tip
    p.mouse.click(hit["x"], hit["y"])
    assert "/w/train.py:30 <module>" in p.locator("#tl-details .stack").inner_text()
    assert r.errors() == [] and p.evaluate("window.__stepscope.errors") == []
    p.close()


def test_a_findings_steps_read_as_ranges(browser: Any, reports: dict[str, Path]) -> None:
    """A finding over every step of a long window listed 846 numbers; runs of steps read as
    ranges."""
    r = load(browser, reports["cnn"])
    p = r.page
    assert p.evaluate("window.__stepscope.stepRanges([3, 0, 1, 2, 7, 9, 10])") == "0-3, 7, 9, 10"
    many = p.evaluate("window.__stepscope.stepRanges(Array.from({length: 40}, (_, i) => 2 * i))")
    assert many.startswith("0, 2, 4") and many.endswith("… (40 steps)")
    assert r.errors() == []
