"""HTML report: the embedded payload (decoded here as the browser decodes it), escaping of
hostile names, the Content-Security-Policy, size per event, and the CLI."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import TraceBuilder
from stepscope.cli.main import main
from stepscope.reporters.html import render_html, script_json
from stepscope.reporters.report import build_report
from stepscope.reporters.timeline_build import build_timeline
from stepscope.reporters.timeline_columns import (
    ESC,
    lane_overlaps,
    lanes,
    nesting_depth,
    row_groups,
)
from stepscope.reporters.timeline_counters import decimate
from stepscope.reporters.timeline_data import K
from stepscope.store.manifest import Manifest, RankInfo, SourceInfo
from stepscope.store.writer import write_run

HOSTILE = [
    "</script><script>window.__pwned=1</script>",
    "<img src=x onerror=window.__pwned=1>",
    "{{JS}} {{DATA}} \u2028\u2029 & <!-- -->",
]


def _data(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="stepscope-data">(.*?)</script>', html, re.DOTALL)
    assert m is not None
    out: dict[str, Any] = json.loads(m.group(1))
    return out


def _blob(html: str) -> bytes:
    m = re.search(r'<script type="application/octet-stream" id="stepscope-blob">(.*?)</script>',
                  html, re.DOTALL)
    assert m is not None
    return zlib.decompress(base64.b64decode(m.group(1)))


def decode(meta: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """The browser's decoding (report.js ``Events``), in numpy: absolute ns per event."""
    arr = {name: np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"), count=n, offset=off)
           for name, (dt, off, n) in meta["arrays"].items()}
    n = meta["events"]
    start = np.zeros(n, dtype=np.int64)
    dur = arr["dur"].astype(np.int64)
    big_dt, big_dur = iter(arr["big_dt"].tolist()), iter(arr["big_dur"].tolist())
    off = arr["lane_off"]
    for lane in range(off.size - 1):
        prev = 0
        for i in range(int(off[lane]), int(off[lane + 1])):
            d = int(arr["dt"][i])
            prev += int(next(big_dt)) if d == ESC else d
            start[i] = prev
            if dur[i] == ESC:
                dur[i] = int(next(big_dur))
    lane_of = np.repeat(np.arange(off.size - 1), np.diff(off.astype(np.int64)))
    names = [meta["strings"][i] for i in arr["name"]]
    return {"start": start + int(meta["t0_ns"]), "dur": dur, "kind": arr["kind"], "name": names,
            "lane": lane_of, "arrays": arr}


def small_run(tmp_path: Path, names: list[str] | None = None):  # type: ignore[no-untyped-def]
    b = TraceBuilder()
    kn = names or ["gemm_kernel"]
    for i in range(3):
        t = 1000.0 + i * 1000.0
        b.step(t, 1000, step=i)
        b.cpu_op("aten::mm", t + 5, 30)
        b.kernel(kn[i % len(kn)], t + 50, 400, launch=(t + 10, 8), grid=(16, 1, 1),
                 block=(128, 1, 1), regs=64)
        b.memcpy("HtoD", t + 500, 20, 1 << 20, src="pageable", api=("cudaMemcpy", t + 480, 45))
        b.nvtx(kn[i % len(kn)], t + 2, 60)
        b.memory(t + 600, 1 << 20, (i + 1) << 20, 8 << 20)
    b.sample("gpu.sm_util", 1500, 55.0, device=0)
    b.sample("gpu.sm_util", 2500, 65.0, device=0)
    return b.build(tmp_path / "run")


def test_payload_decodes_to_the_run(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    out = render_html(build_report(run, page=True))
    data = _data(out.text)
    meta = data["timeline"]
    ev = decode(meta, _blob(out.text))
    assert meta["events"] == out.timeline.events == ev["start"].size
    # every kernel comes back at its exact ns time, with its name and launch geometry
    k = run.table("kernels")
    sel = ev["kind"] == K["kernel"]
    assert sorted(ev["start"][sel].tolist()) == sorted(k.column("ts_ns").to_pylist())
    assert ev["dur"][sel].tolist() == [400_000] * 3
    assert {n for n, s in zip(ev["name"], sel) if s} == {"gemm_kernel"}
    cfg = meta["kernel_configs"]
    row = cfg["rows"][int(ev["arrays"]["k_cfg"][0])]
    geo = dict(zip(cfg["columns"], row))
    assert (geo["grid_x"], geo["block_x"], geo["registers"]) == (16, 128, 64)
    assert geo["sm_coverage"] == pytest.approx(16 / 132, abs=1e-4)
    # copies keep bytes and pageable/pinned; API calls keep the correlation that links them
    cp = ev["kind"] == K["memcpy"]
    assert ev["arrays"]["c_bytes"].tolist() == [float(1 << 20)] * 3
    assert {meta["memory_kinds"][x] for x in ev["arrays"]["c_src"]} == {"pageable"}
    launches = ev["arrays"]["a_corr"][ev["arrays"]["a_kind"] == meta["api_kinds"].index("launch")]
    assert sorted(launches.tolist()) == sorted(ev["arrays"]["k_corr"].tolist())
    assert int(cp.sum()) == 3
    # tracks: steps, one GPU stream, one host thread; steps and counters are there
    types = [t["type"] for t in meta["tracks"]]
    assert types[0] == "steps" and "stream" in types and "thread" in types and "counter" in types
    assert [s["start_us"] for s in data["ui"]["steps"]] == [
        (1000.0 + i * 1000.0) * 1000 / 1e3 - (int(meta["t0_ns"]) - 0) / 1e3 for i in range(3)]
    mem = next(c for c in meta["counters"] if c["kind"] == "memory")
    assert mem["series"]["allocated"] == [1 << 20, 2 << 20, 3 << 20]
    assert mem["capacity"] == 85017493504
    assert data["report"]["schema"] == "stepscope.report/1"


def test_nesting_depth_puts_children_below_parents() -> None:
    s = np.array([0, 10, 20, 30, 100, 100], dtype=np.int64)
    e = np.array([90, 80, 40, 35, 120, 100], dtype=np.int64)  # last one: zero length at 100
    assert nesting_depth(s, e).tolist() == [0, 1, 2, 3, 0, 1]


def test_partial_overlaps_get_their_own_lane() -> None:
    # a frame [0, 100), a marker [50, 200) that cuts it, then [120, 150) inside the marker:
    # counting open events puts the last one at depth 1, on top of the marker
    s = np.array([0, 50, 120, 10], dtype=np.int64)
    e = np.array([100, 200, 150, 40], dtype=np.int64)
    assert nesting_depth(s, e).tolist() == [0, 1, 1, 1]
    assert lane_overlaps(s, e, nesting_depth(s, e)).tolist() == [False, False, True, False]
    got = lanes(s, e)
    assert got.tolist() == [0, 1, 2, 1] and not lane_overlaps(s, e, got).any()


def test_row_groups_match_numpy_unique_rows() -> None:
    rng = np.random.default_rng(1)
    cols = [rng.integers(0, 3, 500), rng.integers(-5, 10**12, 500) // 10**11, rng.integers(0, 2, 500)]
    group, first = row_groups([c.astype(np.int64) for c in cols])
    _, ref_first, ref_inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                      return_inverse=True)
    assert group.tolist() == ref_inv.reshape(-1).tolist()
    assert first.tolist() == ref_first.tolist()


def test_decimate_keeps_peaks() -> None:
    ts = np.arange(10_000, dtype=np.int64)
    v = np.zeros(10_000)
    v[4321] = 7.0
    t2, (v2,) = decimate(ts, [v], 100, "max")
    assert t2.size <= 100 and v2.max() == 7.0
    _, (m,) = decimate(ts, [np.ones(10_000)], 100, "mean")
    assert np.allclose(m, 1.0)


def test_event_budget_drops_python_frames_first(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 1000)
    for i in range(10):
        b.cpu_op(f"f.py({i}): g", i * 50, 5 + i, kind="python")
        b.kernel("k", i * 50 + 10, 20)
    run = b.build(tmp_path / "run")
    # 22 events: 10 kernels, 10 frames, the step and its ProfilerStep annotation
    tl = build_timeline(run, build_report(run).analysis, max_events=16)
    assert tl.events == 16 and tl.meta["dropped"] == 6
    ev = decode(tl.meta, zlib.decompress(tl.blob))
    assert int((ev["kind"] == K["kernel"]).sum()) == 10  # GPU work is never dropped
    assert sorted(int(d) for d, k in zip(ev["dur"], ev["kind"]) if k == K["python"]) == [
        11_000, 12_000, 13_000, 14_000]  # the 4 longest frames stay


def test_hostile_names_cannot_break_out(tmp_path: Path) -> None:
    run = small_run(tmp_path, HOSTILE)
    html = render_html(build_report(run, page=True)).text
    # exactly the page's own three script elements, and no markup from the trace
    assert len(re.findall(r"<script", html, re.IGNORECASE)) == 3
    assert len(re.findall(r"</script", html, re.IGNORECASE)) == 3
    assert "<img" not in html and "\u2028" not in html and "\u2029" not in html
    assert "window.__pwned" in html  # present, but only inside JSON strings as data
    data = _data(html)
    assert set(HOSTILE) <= set(data["timeline"]["strings"])  # names survive exactly
    assert html.count("{{") == html.count("{{JS}}") + html.count("{{DATA}}")  # slots filled once
    assert "{{JS}} {{DATA}}" in json.dumps(data, ensure_ascii=False)


def test_html_takes_the_report_with_its_page(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    with pytest.raises(ValueError, match="page=True"):
        render_html(build_report(run))  # the page is read from the run when the report is built
    rep = build_report(run, page=True)
    assert rep.page is not None and rep.page.api_calls == run.table("api_calls").num_rows
    assert render_html(rep).timeline is rep.page.timeline


def test_csp_allows_only_the_page_script(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    html = render_html(build_report(run, page=True)).text
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp is not None
    policy = csp.group(1)
    assert "default-src 'none'" in policy and "img-src data:" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    script = re.search(r"<script>(.*)</script>\s*</body>", html, re.DOTALL)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"'sha256-{digest}'" in policy
    assert not re.search(r"https?://", html.replace("http://www.w3.org/2000/svg", ""))


def test_script_json_escapes_what_closes_a_script() -> None:
    text = script_json({"a": "</script>&<!--\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script>&<!--\u2028"}


def test_js_never_parses_html() -> None:
    js = (Path(__file__).parents[2] / "src/stepscope/reporters/assets/report.js").read_text()
    for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                "new Function", "fetch(", "XMLHttpRequest"):
        assert bad not in js


def _bulk_run(path: Path, n: int) -> Any:
    """n kernels, each with its launch call and enclosing op (3n events), written in bulk."""
    rng = np.random.default_rng(0)
    ts = 10**18 + np.cumsum(rng.integers(3_000, 20_000, n))
    corr = np.arange(1, n + 1)
    names = np.array([f"kernel_{i}" for i in range(40)], dtype=object)[rng.integers(0, 40, n)]
    tables = {
        "kernels": {"ts_ns": ts, "dur_ns": rng.integers(1_000, 3_000, n), "device": np.zeros(n),
                        "stream": np.full(n, 7), "correlation": corr, "name": names, "grid_x": np.full(n, 64),
                        "grid_y": np.ones(n), "grid_z": np.ones(n), "block_x": np.full(n, 256),
                        "block_y": np.ones(n), "block_z": np.ones(n), "registers": np.full(n, 32),
                        "shared_memory": np.zeros(n)},
        "api_calls": {"ts_ns": ts - 9_000, "dur_ns": np.full(n, 4_000), "pid": np.ones(n), "tid": np.ones(n),
                          "correlation": corr, "name": np.array(["cudaLaunchKernel"] * n, dtype=object),
                          "kind": np.array(["launch"] * n, dtype=object)},
        "cpu_ops": {"ts_ns": ts - 10_000, "dur_ns": np.full(n, 6_000), "pid": np.ones(n), "tid": np.ones(n),
                        "name": np.array(["aten::add"] * n, dtype=object),
                        "kind": np.array(["framework"] * n, dtype=object)},
    }
    write_run(path, Manifest(source=SourceInfo(kind="synthetic"), ranks=(RankInfo(rank=0),)),
              [(0, tables)])
    from stepscope.store.run import Run

    return Run(path)


def test_size_per_event_keeps_200k_gpu_events_under_10_mb(tmp_path: Path) -> None:
    run = _bulk_run(tmp_path / "bulk", 30_000)
    out = render_html(build_report(run, page=True))
    assert out.timeline.events == 90_001  # and the one whole-trace step
    payload = len(base64.b64encode(out.timeline.blob))
    # ~3 host+GPU events per GPU event; 200k GPU events must stay well under 10 MB of HTML
    assert payload / 30_000 * 200_000 < 7_000_000
    assert len(out.text.encode()) < 3_000_000


def test_cli_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path)
    assert main(["report", str(run.path), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(run.path), "--format", "html"]) == 0
    assert (run.path / "report.html").exists()
    assert "report.html" in capsys.readouterr().out
