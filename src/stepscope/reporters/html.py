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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from stepscope._version import __version__
from stepscope.reporters.json_report import jsonable, report_dict
from stepscope.reporters.report import Report
from stepscope.reporters.timeline_data import Page, Timeline, rel_us

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


def _steps(report: Report, t0: int, shifts: Mapping[int, int]) -> list[dict[str, Any]]:
    out = []
    for ra in report.analysis.ranks:
        sh = shifts.get(ra.rank, 0)
        for st, busy, bd in zip(ra.steps.steps, ra.step_busy_ns, ra.breakdown.per_step):
            out.append({"rank": ra.rank, "index": st.index, "number": st.number,
                        "start_us": rel_us(st.start_ns + sh, t0), "end_us": rel_us(st.end_ns + sh, t0),
                        "wall_ms": st.wall_ns / 1e6, "gpu_busy_ms": busy / 1e6,
                        "steady": st.steady, "note": st.note,
                        "breakdown": {c: v / 1e6 for c, v in bd.items()}})
    return out


def _where(report: Report, t0: int, shifts: Mapping[int, int]) -> list[dict[str, Any] | None]:
    """Per finding, the time range to open in the timeline (µs on its shared axis), from its
    range or steps."""
    out: list[dict[str, Any] | None] = []
    for f in report.advice.findings:
        w = f.where
        s, e = w.start_ns, w.end_ns
        if (s is None or e is None) and w.steps:
            ranks = [ra for ra in report.analysis.ranks if w.rank is None or ra.rank == w.rank]
            st = [x for ra in ranks for x in ra.steps.steps if x.index in w.steps]
            if st:
                s, e = min(x.start_ns for x in st), max(x.end_ns for x in st)
        sh = shifts.get(w.rank, 0) if w.rank is not None else 0
        out.append(None if s is None or e is None else
                   {"rank": w.rank, "start_us": rel_us(s + sh, t0), "end_us": rel_us(e + sh, t0),
                    "kernel": w.kernels[0] if w.kernels else None})
    return out


def _syncs(report: Report, t0: int, shifts: Mapping[int, int]) -> list[dict[str, Any]]:
    out = []
    for ra in report.analysis.ranks:
        sh = shifts.get(ra.rank, 0)
        for ev in ra.syncs.events:
            d = jsonable(ev)
            d.update(rank=ra.rank, start_us=rel_us(ev.ts_ns + sh, t0),
                     end_us=rel_us(ev.end_ns + sh, t0))
            out.append(d)
    return out


def ui_data(report: Report, page: Page) -> dict[str, Any]:
    t0 = int(page.timeline.meta["t0_ns"])
    # each rank's times on the timeline's shared axis (its clock offset, model.clocks)
    clock = page.timeline.meta.get("clock") or {}
    shifts = {int(o["rank"]): int(o["offset_ns"]) for o in clock.get("offsets", [])}
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
    kernels = []
    for rank, table in page.kernels:
        for row in table:
            d = jsonable(row)
            d["rank"] = rank
            kernels.append(d)
    return {
        "generator": f"stepscope {__version__}",
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "title": m.source.files[0].rsplit("/", 1)[-1] if m.source.files else str(report.run_path),
        "t0_ns": str(t0),
        "steps": _steps(report, t0, shifts),
        "where": _where(report, t0, shifts),
        "precision_ms": precision,
        "categories_ms": categories,
        "mean_occupancy": (sum(o * w for o, w in occ) / sum(w for _, w in occ)
                           if occ and sum(w for _, w in occ) else None),
        "overhead": jsonable(m.overhead),
        "settings": jsonable(m.settings),
        "devices": [jsonable(d) for d in page.devices],
        "kernels": kernels,
        "kernels_top_only": page.kernels_top_only,
        "copies": page.copies,
        "sync_events": _syncs(report, t0, shifts),
        "api_calls": page.api_calls,
        "launch_apis": page.launch_apis,
    }


def _fill(template: str, slots: dict[str, str]) -> str:
    """One pass over the template only: text put into a slot is never scanned for slots."""
    return _SLOT.sub(lambda m: slots[m.group(1)], template)


def render_html(report: Report) -> HtmlReport:
    """The report as one HTML document (string) and the timeline payload it embeds; the report
    must carry its page (``build_report(run, page=True)``)."""
    page = report.page
    if page is None:
        raise ValueError("the HTML report needs the report's page: build_report(run, page=True)")
    timeline = page.timeline
    data = {"report": report_dict(report), "ui": ui_data(report, page),
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


def to_html(report: Report) -> str:
    return render_html(report).text


def write_html(report: Report, path: str | Path) -> Path:
    out = Path(path)
    out.write_text(to_html(report), encoding="utf-8")
    return out
