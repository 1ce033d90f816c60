"""The card a notebook shows for a profile (``Profile._repr_html_``): the overview (steps,
step time, GPU busy, the breakdown bar with its legend) and the findings, as one HTML
fragment with inline styles (no script, no network). Every name from a trace or a path is
escaped."""

from __future__ import annotations

import html

from stepscope.analysis.breakdown import CATEGORIES
from stepscope.analysis.summary import summarize
from stepscope.reporters.report import Report, fix_for
from stepscope.reporters.terminal import HOST_LABEL, LABEL

COLOR = {"compute": "#2e9d4c", "communication": "#b04ab8", "copies": "#2aa3b8",
         "input_wait": "#d6453d", "sync": "#d9b02a", "launch": "#5b8def", "host": "#2f4fa8",
         "idle": "#a0a0a0"}
SEVERITY_COLOR = {"critical": "#d6453d", "warning": "#d98a1a", "info": "#5b8def"}
TOP_FINDINGS = 10


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def card_html(report: Report, *, note: str = "", top: int = TOP_FINDINGS) -> str:
    """The overview and the first ``top`` findings of ``report`` (``note``: one line under the
    title, e.g. where the run was imported to)."""
    s = summarize(report.analysis)
    m = report.manifest
    head = (f"<div style='font-weight:bold'>stepscope: {_e(report.run_path)}</div>"
            f"<div style='color:#666'>{_e(m.source.kind)} · {len(report.analysis.ranks)} "
            f"rank(s){' · ' + _e(note) if note else ''}"
            f"{' · PARTIAL' if report.ending.cut_short else ''}</div>")
    if s.step_time is not None:
        st = s.step_time
        facts = (f"{s.steps} steps ({s.steady_steps} steady) · step {st.mean_ms:.2f} ms mean, "
                 f"{st.median_ms:.2f} median, cv {st.cv:.2f} · GPU busy {s.gpu_busy_pct:.0f}%")
    else:
        facts = "no steps found"
    parts = [head, f"<div>{_e(facts)}</div>", _bar(report, s.breakdown_ms, bool(s.devices_used))]
    parts.append(_findings(report, top))
    return ("<div class='stepscope-card' style='font-family:sans-serif;font-size:13px;"
            "max-width:900px'>" + "".join(parts) + "</div>")


def _bar(report: Report, breakdown_ms: dict[str, float], gpu: bool) -> str:
    total = sum(breakdown_ms.values())
    if total <= 0:
        return ""
    labels = LABEL if gpu else HOST_LABEL
    cells, legend = [], []
    for c in CATEGORIES:
        v = breakdown_ms.get(c, 0.0)
        if v <= 0:
            continue
        pct = 100.0 * v / total
        cells.append(f"<div title='{_e(labels[c])}' style='width:{pct:.3f}%;"
                     f"background:{COLOR[c]}'></div>")
        legend.append(f"<span style='margin-right:12px;white-space:nowrap'>"
                      f"<span style='color:{COLOR[c]}'>■</span>"
                      f" {_e(labels[c])} {v:.2f} ms ({pct:.0f}%)</span>")
    return ("<div style='display:flex;height:14px;margin:6px 0;border-radius:3px;"
            "overflow:hidden'>" + "".join(cells) + "</div>"
            "<div style='color:#333'>" + " ".join(legend) + "</div>")


def _findings(report: Report, top: int) -> str:
    fs = report.advice.findings
    if not fs:
        return "<div style='margin-top:8px'>no findings</div>"
    rows = []
    for f in fs[:top]:
        sev = f.severity.value
        fix = fix_for(f.fix, report.frameworks)
        rows.append(
            f"<tr style='vertical-align:top'><td style='color:{SEVERITY_COLOR.get(sev, '#333')};"
            f"padding-right:8px'>{_e(sev)}</td><td style='padding-right:8px'><code>{_e(f.id)}"
            f"</code></td><td style='text-align:right;padding-right:8px;white-space:nowrap'>"
            f"{f.est_saving_ms:.2f} ms ({f.est_saving_pct:.0f}%)</td><td>{_e(f.title)}"
            + (f"<div style='color:#666;font-size:12px'>fix: {_e(fix)}</div>" if fix else "")
            + "</td></tr>")
    more = (f"<div style='color:#666'>and {len(fs) - top} more: findings()</div>"
            if len(fs) > top else "")
    return ("<table style='margin-top:8px;border-collapse:collapse;font-size:13px'><tr>"
            "<th align='left'>"
            "severity</th><th align='left'>finding</th><th align='right'>saving / step</th>"
            "<th align='left'></th></tr>" + "".join(rows) + "</table>" + more)
