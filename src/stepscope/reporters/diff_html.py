"""The diff as one compact, self-contained HTML page: no script, no network.

Rendered here, not in the browser: every name from a trace goes through ``html.escape``; the
page reuses the report's stylesheet (``assets/report.css``); a Content-Security-Policy allows
no script and no network at all. The JSON diff (``diff_json``) rides along in a
``<script type="application/json" id="stepscope-diff">`` block (escaped as the report's is),
for tools; it is data, never run.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from importlib import resources

from stepscope._version import __version__
from stepscope.compare import Change, Diff
from stepscope.reporters.diff_json import diff_dict
from stepscope.reporters.diff_terminal import CAUSE_LABEL, calls_text
from stepscope.reporters.html import script_json
from stepscope.reporters.terminal import LABEL

ROWS = 20
CSP = ("default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")
_EXTRA_CSS = """
.verdict { font-size: 22px; font-weight: 700; }
.verdict.faster { color: var(--ok); } .verdict.slower { color: var(--crit); }
.verdict.inconclusive { color: var(--warn); }
.pos { color: var(--crit); } .neg { color: var(--ok); }
.dbar { display: inline-block; height: 10px; vertical-align: middle; border-radius: 2px; }
"""


def _css() -> str:
    """The report's stylesheet (``assets/report.css``)."""
    return (resources.files("stepscope.reporters") / "assets" / "report.css").read_text(
        encoding="utf-8")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pct(v: float) -> str:
    return "?" if not math.isfinite(v) else f"{v:+.1f}%"


def _cls(delta: float) -> str:
    return "pos" if delta > 0 else ("neg" if delta < 0 else "")


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], text_cols: int = 1) -> str:
    hs = "".join(f'<th class="text">{_e(h)}</th>' if i < text_cols else f"<th>{_e(h)}</th>"
                 for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f"<table><thead><tr>{hs}</tr></thead><tbody>{body}</tbody></table>"


def _num(v: float, fmt: str = ".3f", delta: bool = False) -> str:
    cls = f' class="{_cls(v)}"' if delta else ""
    return f"<td{cls}>{v:{'+' if delta else ''}{fmt}}</td>"


def _changes(title_: str, rows: tuple[Change, ...]) -> str:
    shown = [c for c in rows if abs(c.delta_ms) > 0][:ROWS]
    if not shown:
        return f"<h3>{_e(title_)}</h3><p class=\"note\">no change</p>"
    body = []
    for c in shown:
        how = {"new": "new", "gone": "gone"}.get(c.status, "")
        title = c.name
        if c.matched_by and c.matched_by != "name":
            how, title = "renamed", f"{c.name}\nwas: {c.base_name}\nmatched by {c.matched_by}"
        calls = (f"{calls_text(c.base.calls) if c.base else '-'} → "
                 f"{calls_text(c.new.calls) if c.new else '-'}")
        body.append([f'<td class="name" title="{_e(title)}">{_e(c.name)}</td>',
                     f'<td class="text muted">{_e(how)}</td>',
                     f"<td>{_e(calls)}</td>", _num(c.base_ms), _num(c.new_ms),
                     _num(c.delta_ms, delta=True)])
    return f"<h3>{_e(title_)}</h3>" + _table(
        ["name", "", "calls per step", "base ms", "new ms", "delta ms"], body, 2)


def _categories(d: Diff) -> str:
    scale = max((abs(c.delta_ms) for c in d.categories), default=0.0) or 1.0
    body = []
    for c in d.categories:
        if c.base_ms == 0 and c.new_ms == 0:
            continue
        width = int(round(120 * abs(c.delta_ms) / scale))
        bar = (f'<span class="dbar" style="width:{width}px;background:var(--c-{c.name})">'
               "</span>")
        body.append([f'<td class="text">{_e(LABEL[c.name])}</td>', _num(c.base_ms, ".2f"),
                     _num(c.new_ms, ".2f"), _num(c.delta_ms, ".2f", delta=True),
                     f'<td class="text">{bar}</td>'])
    return _table(["category", "base ms", "new ms", "delta ms", ""], body)


def _causes(d: Diff) -> str:
    body = [[f'<td class="text">{_e(CAUSE_LABEL.get(c.name, c.name))}</td>',
             _num(c.base_ms, ".2f"), _num(c.new_ms, ".2f"), _num(c.delta_ms, ".2f", delta=True)]
            for c in d.causes if c.base_ms or c.new_ms]
    return _table(["the GPU's time, by what it waited for", "base ms", "new ms", "delta ms"],
                  body)


def _findings(d: Diff) -> str:
    moved = [f for f in d.findings if f.status != "unchanged"]
    if not moved:
        return '<p class="note">No finding appeared, went away or changed.</p>'
    body = []
    for f in moved:
        side = f.new or f.base
        sev = f"{f.base.severity if f.base else '-'} → {f.new.severity if f.new else '-'}"
        body.append([f'<td class="text">{_e(f.status)}</td>', f'<td class="text">{_e(f.id)}</td>',
                     f'<td class="text">{_e(sev)}</td>',
                     _num(f.delta_saving_ms, ".2f", delta=True),
                     f'<td class="text">{_e(side.title if side else "")}</td>'])
    return _table(["status", "rule", "severity", "saving delta ms", "title"], body, 3)


def diff_html(d: Diff, *, fail_above: float | None = None) -> str:
    s = d.step
    runs = "".join(f"<li><b>{side}</b> {_e(r.label)} <span class=\"muted\">(rank "
                   f"{_e(', '.join(map(str, r.ranks)))}, {r.steady_steps} steady steps)</span></li>"
                   for side, refs in (("BASE", d.base), ("NEW", d.new)) for r in refs)
    ranks = ""
    if d.ranks:
        ranks = "<section><h2>Per rank</h2>" + _table(
            ["rank", "verdict", "base ms", "new ms", "change"],
            [[f'<td class="text">{r.base_rank}</td>', f'<td class="text">{r.step.verdict.value}</td>',
              _num(r.step.base_ms, ".2f"), _num(r.step.new_ms, ".2f"),
              f"<td>{_e(_pct(r.step.change_pct))}</td>"] for r in d.ranks], 2) + "</section>"
    b, n = d.mean_ms
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP, quote=False)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>stepscope diff · {_e(d.verdict.value)}</title>
<style>{_css()}{_EXTRA_CSS}</style></head>
<body><header class="top"><div class="brand">stepscope diff</div>
<div class="status">stepscope {_e(__version__)}</div></header><main>
<section id="verdict"><h2>Verdict</h2>
<div class="verdict {_e(d.verdict.value)}">{_e(d.verdict.value.upper())}</div>
<p>median step {s.base_ms:.2f} → {s.new_ms:.2f} ms; shift {s.shift_ms:+.2f} ms
({_e(_pct(s.change_pct))})</p>
<p class="note">{_e(s.reason)}; {_e(d.test)}; same within ±{s.margin_pct:g}%.
Aligned: {_e(d.alignment)}.</p><ul class="note">{runs}</ul></section>
<section id="categories"><h2>Where the change came from</h2>
<p class="note">ms per steady step; mean step {b:.2f} → {n:.2f} ms (the categories sum to these)</p>
{_categories(d)}
<p class="note">The same time with the GPU's idle time split by what it waited for, as the
advisor splits it (a sync's cost includes the queue refilling after it; host work includes
idle time no recorded event explains)</p>
{_causes(d)}</section>
<section id="kernels"><h2>Kernels and ops</h2>
{_changes("Kernels that changed most (per steady step)", d.kernels)}
{_changes("Ops that changed most (per steady step, inclusive time)", d.ops)}</section>
<section id="findings"><h2>Findings</h2>{_findings(d)}</section>
{ranks}
<script type="application/json" id="stepscope-diff">{script_json(diff_dict(d, fail_above=fail_above))}</script>
</main></body></html>
"""
