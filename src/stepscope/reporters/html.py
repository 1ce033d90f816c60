"""The HTML report: one self-contained file (inline CSS/JS, no network), safe with any trace names.

The page is ``assets/template.html`` with ``assets/report.css`` and ``assets/report.js`` inlined
and two data blocks:

* ``<script type="application/json" id="stepscope-data">``: ``{"report": report_dict(...),
  "ui": ..., "timeline": Timeline.meta}``. ``report`` is the JSON report (the contract in
  :mod:`stepscope.reporters.json_report`); ``ui`` adds what the page needs in a form the
  browser can use directly (times as µs relative to the timeline's ``t0``, because ns since
  the epoch do not fit a JavaScript number exactly; the full kernel table; the longest
  copies; precision mix; capture overhead). ``<``, ``>``, ``&``, U+2028 and U+2029 are written
  as ``\\u003c`` etc., so no trace name can close the script element.
* ``<script type="application/octet-stream" id="stepscope-blob">``: the timeline's binary
  columns, zlib-compressed, base64 (see :mod:`stepscope.reporters.timeline_data`).

Names are only ever rendered by the script through ``textContent`` or canvas ``fillText``.
A Content-Security-Policy meta allows no network at all and only the page's own script
(by its SHA-256), so even a name that slipped into markup could not run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope import __version__
from stepscope.analysis.kernels import kernel_table
from stepscope.report import Report
from stepscope.reporters.json_report import jsonable, report_dict
from stepscope.reporters.timeline_data import Timeline, build_timeline
from stepscope.store.run import Run

KERNEL_ROWS = 1000  # per rank, by total time
FULL_TABLE_MAX_LAUNCHES = 50_000  # above this, the kernels section shows the analysis' top rows
COPY_ROWS = 500  # longest copies listed in the copies section
DEFAULT_MAX_EVENTS = 3_000_000
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
            "\u2029": "\\u2029"}
_SLOT = re.compile(r"\{\{([A-Z_]+)\}\}")


@dataclass(frozen=True)
class HtmlReport:
    text: str
    timeline: Timeline


def script_json(obj: Any) -> str:
    """JSON safe to embed in a ``<script>`` element: no ``<``, ``>``, ``&``, U+2028/9."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _ESCAPES[m.group(0)], text)


def _asset(name: str) -> str:
    return (resources.files("stepscope.reporters") / "assets" / name).read_text(encoding="utf-8")


def _rel_us(ns: int | None, t0: int) -> float | None:
    return None if ns is None else round((int(ns) - t0) / 1e3, 3)


def _steps(report: Report, t0: int) -> list[dict[str, Any]]:
    out = []
    for ra in report.analysis.ranks:
        for st, busy, bd in zip(ra.steps.steps, ra.step_busy_ns, ra.breakdown.per_step):
            out.append({"rank": ra.rank, "index": st.index, "number": st.number,
                        "start_us": _rel_us(st.start_ns, t0), "end_us": _rel_us(st.end_ns, t0),
                        "wall_ms": st.wall_ns / 1e6, "gpu_busy_ms": busy / 1e6,
                        "steady": st.steady, "note": st.note,
                        "breakdown": {c: v / 1e6 for c, v in bd.items()}})
    return out


def _where(report: Report, t0: int) -> list[dict[str, Any] | None]:
    """Per finding, the time range to open in the timeline (µs), from its range or steps."""
    out: list[dict[str, Any] | None] = []
    for f in report.advice.findings:
        w = f.where
        s, e = w.start_ns, w.end_ns
        if (s is None or e is None) and w.steps:
            ranks = [ra for ra in report.analysis.ranks if w.rank is None or ra.rank == w.rank]
            st = [x for ra in ranks for x in ra.steps.steps if x.index in w.steps]
            if st:
                s, e = min(x.start_ns for x in st), max(x.end_ns for x in st)
        out.append(None if s is None or e is None else
                   {"rank": w.rank, "start_us": _rel_us(s, t0), "end_us": _rel_us(e, t0),
                    "kernel": w.kernels[0] if w.kernels else None})
    return out


def _kernels(run: Run, report: Report) -> tuple[list[dict[str, Any]], bool]:
    """Kernel table rows of every rank, and whether some rank's table is only its top rows.

    Ranks with more than :data:`FULL_TABLE_MAX_LAUNCHES` launches use the analysis' own top
    kernels (:data:`stepscope.analysis.TOP_KERNELS`) instead of recomputing the full table.
    """
    rows, partial = [], False
    for ra in report.analysis.ranks:
        if ra.kernel_count > FULL_TABLE_MAX_LAUNCHES:
            table, partial = ra.kernels, partial or ra.kernel_count > len(ra.kernels)
        else:
            table = kernel_table(report.analysis.graph.rank(ra.rank), window=ra.steady_window,
                                 limit=KERNEL_ROWS)
        for k in table:
            d = jsonable(k)
            d["rank"] = ra.rank
            rows.append(d)
    return rows, partial


def _copies(run: Run, t0: int) -> dict[str, Any]:
    m = run.table("memcpy")
    total = m.num_rows
    if total > COPY_ROWS:
        dur = m.column("dur_ns").to_numpy()
        m = m.take(pa.array(np.argsort(-dur, kind="stable")[:COPY_ROWS]))
    rows = []
    for r in m.to_pylist():
        rows.append({"rank": r["rank"], "start_us": _rel_us(r["ts_ns"], t0),
                     "dur_us": r["dur_ns"] / 1e3, "kind": r["kind"], "bytes": r["bytes"],
                     "src": r["src_kind"], "dst": r["dst_kind"], "device": r["device"],
                     "stream": r["stream"],
                     "gbs": (r["bytes"] / r["dur_ns"]) if r["bytes"] and r["dur_ns"] else None})
    rows.sort(key=lambda r: -float(r["dur_us"]))
    return {"total": total, "rows": rows}


def _syncs(report: Report, t0: int) -> list[dict[str, Any]]:
    out = []
    for ra in report.analysis.ranks:
        for ev in ra.syncs.events:
            d = jsonable(ev)
            d.update(rank=ra.rank, start_us=_rel_us(ev.ts_ns, t0), end_us=_rel_us(ev.end_ns, t0))
            out.append(d)
    return out


def _devices(run: Run) -> list[dict[str, Any]]:
    t = run.table("devices")
    return [jsonable(d) for d in t.to_pylist()]


def ui_data(report: Report, run: Run, timeline: Timeline) -> dict[str, Any]:
    t0 = int(timeline.meta["t0_ns"])
    ks = [ra.kernel_summary for ra in report.analysis.ranks]
    precision: dict[str, float] = {}
    categories: dict[str, float] = {}
    for k in ks:
        for p, ns in k.by_precision_ns.items():
            precision[p] = precision.get(p, 0.0) + ns / 1e6
        for c, ns in k.by_category_ns.items():
            categories[c] = categories.get(c, 0.0) + ns / 1e6
    occ = [(k.mean_occupancy, k.total_ns) for k in ks if k.mean_occupancy is not None]
    m = report.manifest
    api = run.table("api_calls")
    kernels, top_only = _kernels(run, report)
    return {
        "generator": f"stepscope {__version__}",
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "title": m.source.files[0].rsplit("/", 1)[-1] if m.source.files else str(report.run_path),
        "t0_ns": str(t0),
        "steps": _steps(report, t0),
        "where": _where(report, t0),
        "precision_ms": precision,
        "categories_ms": categories,
        "mean_occupancy": (sum(o * w for o, w in occ) / sum(w for _, w in occ)
                           if occ and sum(w for _, w in occ) else None),
        "overhead": jsonable(m.overhead),
        "settings": jsonable(m.settings),
        "devices": _devices(run),
        "kernels": kernels,
        "kernels_top_only": top_only,
        "copies": _copies(run, t0),
        "sync_events": _syncs(report, t0),
        "api_calls": api.num_rows,
        "launch_apis": int(pc.sum(pc.is_in(api.column("kind").cast(pa.string()),
                                           pa.array(["launch", "graph_launch"]))).as_py() or 0)
        if api.num_rows else 0,
    }


def _fill(template: str, slots: dict[str, str]) -> str:
    """One pass over the template only: text put into a slot is never scanned for slots."""
    return _SLOT.sub(lambda m: slots[m.group(1)], template)


def render_html(report: Report, run: Run | None = None, *,
                max_events: int | None = DEFAULT_MAX_EVENTS) -> HtmlReport:
    """The report as one HTML document (string) and the timeline payload it embeds."""
    run = run if run is not None else Run(report.run_path)
    timeline = build_timeline(run, report.analysis, max_events=max_events)
    data = {"report": report_dict(report), "ui": ui_data(report, run, timeline),
            "timeline": timeline.meta}
    js = _asset("report.js")
    if "</script" in js.lower():
        raise ValueError("report.js must not contain '</script'")
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    csp = ("default-src 'none'; script-src 'sha256-" + digest + "'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    title = f"stepscope · {data['ui']['title']}"
    text = _fill(_asset("template.html"), {
        "CSP": html.escape(csp, quote=False).replace('"', "&quot;"),
        "TITLE": html.escape(title, quote=False),
        "CSS": _asset("report.css"),
        "DATA": script_json(data),
        "BLOB": base64.b64encode(timeline.blob).decode("ascii"),
        "JS": js,
    })
    return HtmlReport(text=text, timeline=timeline)


def to_html(report: Report, run: Run | None = None) -> str:
    return render_html(report, run).text


def write_html(report: Report, path: str | Path, run: Run | None = None) -> Path:
    out = Path(path)
    out.write_text(to_html(report, run), encoding="utf-8")
    return out
