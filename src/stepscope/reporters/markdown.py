"""The report as GitHub-flavoured Markdown: for CI job summaries and pull-request comments.

What the terminal summary says, as tables: the overview, where a step's time goes, the top
kernels, the findings with their estimated savings (and the fix's first line) and, where the
advice has them (``advice.remedies``: the step model's remedies), the remedies by saving and the
plan. Every name
from a trace or a file (kernels, paths, diagnostics) goes through :func:`escape`: Markdown and
HTML syntax is shown as text, never interpreted (a kernel named ``<img src=x>`` or ``a|b``
neither injects HTML nor breaks a table), and ``@name`` / ``#123`` do not mention anyone or
link an issue in a comment.
"""

from __future__ import annotations

import re

from stepscope._version import __version__
from stepscope.analysis.breakdown import CATEGORIES
from stepscope.analysis.summary import RunSummary, summarize
from stepscope.errors import printable
from stepscope.reporters.remedies_view import (
    fixes_for,
    not_calibrated_text,
    pair_text,
    short_title,
)
from stepscope.reporters.report import Report, fix_for
from stepscope.reporters.terminal import HOST_LABEL, LABEL

TOP_KERNELS = 5
TOP_FINDINGS = 8
MAX_NAME = 80  # characters of a name in a table cell
MAX_DIAGNOSTICS = 8

# backslash-escaped: Markdown's ASCII punctuation; as entities: what HTML, mentions (@) and
# issue references (#) would take (a backslash does not stop either of those on GitHub)
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;", "#": "&#35;"}
# (a name is never at the start of a line, so list and heading marks need no escape; with
# the brackets escaped no link can form)
_SPECIAL = re.compile(r"[\\`*_\[\]|~&<>@#]")


def escape(text: str, limit: int | None = None) -> str:
    """``text`` as literal Markdown on one line: control characters escaped, whitespace runs
    one space, cut at ``limit`` characters (``…``), then each special character escaped."""
    t = " ".join(printable(text).split())
    if limit is not None and len(t) > limit:
        t = t[: limit - 1] + "…"
    return _SPECIAL.sub(lambda m: _ENTITIES.get(m.group(), "\\" + m.group()), t)


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _overview(report: Report, s: RunSummary) -> list[str]:
    m = report.manifest
    rows = [("Source", escape(f"{m.source.kind}, {len(m.ranks)} rank(s)"))]
    rows.append(("Steps", escape(s.step_detail or "none") + (f" ({s.steady_steps} steady)"
                                                            if s.steps else "")))
    if s.step_time is not None:
        st = s.step_time
        rows.append(("Step time", f"**{st.median_ms:.2f} ms** median, {st.mean_ms:.2f} mean, "
                                  f"{st.p95_ms:.2f} p95"))
    if s.devices_used:
        rows.append(("GPU busy", f"**{s.gpu_busy_pct:.1f}%** of step time"))
        rows.append(("Kernels", f"{s.kernels} ({s.kernel_time_ms:.1f} ms)"))
    else:
        rows.append(("GPU activity", "none recorded"))
    verdict = report.input_pipeline
    if verdict is not None:
        rows.append(("Input pipeline", escape(f"{verdict.text} ({verdict.input_bound_pct:.1f}% "
                                              "of the step waiting for input)")))
    out = [_row("", ""), _row("---", "---")]
    return out + [_row(f"**{k}**", v) for k, v in rows]


def _breakdown(s: RunSummary) -> list[str]:
    total = sum(s.breakdown_ms.values())
    if s.step_time is None or total <= 0:
        return []
    labels = LABEL if s.devices_used else HOST_LABEL
    out = ["### Where a step's time goes (mean of steady steps)", "",
           _row("category", "ms per step", "share"), _row("---", "---:", "---:")]
    for c in sorted(CATEGORIES, key=lambda c: -s.breakdown_ms.get(c, 0.0)):
        v = s.breakdown_ms.get(c, 0.0)
        if v > 0:
            out.append(_row(escape(labels[c]), f"{v:.2f}", f"{v / total:.0%}"))
    return out


def _kernels(report: Report) -> list[str]:
    rows = sorted((k for ra in report.analysis.ranks for k in ra.kernels),
                  key=lambda k: k.total_ns, reverse=True)[:TOP_KERNELS]
    if not rows:
        return []
    out = ["### Top kernels (steady-state steps)", "",
           _row("kernel", "calls", "total ms", "share"), _row("---", "---:", "---:", "---:")]
    for k in rows:
        out.append(_row(escape(k.name, MAX_NAME), str(k.calls), f"{k.total_ns / 1e6:.2f}",
                        f"{k.share:.0%}"))
    return out


def _findings(report: Report) -> list[str]:
    adv = report.advice
    if not adv.findings:
        return ["### Findings", "", "None above the reporting thresholds."]
    out = ["### Findings (ranked by estimated saving per step)", "",
           "Each saving is its symptom's own; they overlap. The savings of the fixes beside "
           "them are replayed on the step model, each with the rest of the step.", "",
           _row("#", "severity", "finding", "saving per step", "confidence", "fix"),
           _row("---:", "---", "---", "---:", "---", "---")]
    for i, f in enumerate(adv.findings[:TOP_FINDINGS], 1):
        saving = (f"**{f.est_saving_ms:.2f} ms** ({f.est_saving_pct:.0f}%)"
                  if f.est_saving_ms > 0 else "not estimated")
        if f.est_kernel_saving_pct is not None:
            saving += f"; ~{f.est_kernel_saving_pct:.0f}% of the kernel"
        fixed = fixes_for(adv.remedies, f.id)
        if fixed:  # the remedies' overlap-free savings, replayed on the step model
            saving += f"; as {'fixes' if len(fixed) > 1 else 'a fix'}, replayed: " + ", ".join(
                f"{escape(short_title(r), 80)} **{r.est_saving_ms:.2f} ms** "
                f"({r.est_saving_pct:.0f}%)" for r in fixed)
        fix = fix_for(f.fix, report.frameworks)
        out.append(_row(str(i), f.severity.value, escape(f.title, 200), saving,
                        f.confidence.value,
                        escape(fix.splitlines()[0], 160) if fix else ""))
    if len(adv.findings) > TOP_FINDINGS:
        out += ["", f"{len(adv.findings) - TOP_FINDINGS} more in the JSON report "
                "(`stepscope report RUN --format json`)."]
    if adv.host_trust.note:
        out += ["", f"Note: {escape(adv.host_trust.note)}"]
    return out


def _remedies(report: Report) -> list[str]:
    """The remedies replayed on the step model, by saving, and the plan; none where the advice
    has no ``remedies`` (read by name: a run's advice gains them with the step model)."""
    ra = getattr(report.advice, "remedies", None)
    if ra is None or not getattr(ra, "remedies", None):
        return []
    rank = ra.remedies[0].rank
    out = [f"### Remedies (each replayed on the step model of rank {rank}; savings do not "
           "add up)", "", _row("#", "remedy", "step after", "saving per step"),
           _row("---:", "---", "---:", "---:")]
    for i, r in enumerate(ra.remedies[:TOP_FINDINGS], 1):
        option = f" ({escape(str(r.option))})" if len(r.options) > 1 else ""
        out.append(_row(str(i), escape(r.title, 200) + option, f"{r.predicted_step_ms:.2f} ms",
                        f"**{r.est_saving_ms:.2f} ms** ({r.est_saving_pct:.0f}%)"))
    plan = getattr(ra, "plan", None)
    cal = getattr(ra, "calibration", None)
    if plan is not None:
        together = " together" if len(plan.remedy_ids) > 1 else ""
        given = f" (the untraced step {cal.source})" if cal is not None and cal.reached else ""
        out += ["", f"**Plan:** {escape(' + '.join(plan.remedy_ids))}{together}: "
                    f"{plan.predicted_step_ms:.2f} ms per step from {plan.baseline_ms:.2f} ms"
                    f"{given} (save {plan.est_saving_pct:.0f}%)"]
        pair = pair_text(plan)
        if pair is not None:
            out += ["", f"**Best pair:** {escape(pair)}"]
    unreached = not_calibrated_text(cal)
    if unreached is not None:
        out += ["", unreached]
    return out


def _diagnostics(report: Report) -> list[str]:
    diags = report.manifest.diagnostics
    if not diags:
        return []
    out = ["### Diagnostics", ""]
    for d in diags[:MAX_DIAGNOSTICS]:
        where = f" ({escape(d.file)})" if d.file else ""
        out.append(f"- {escape(d.level)}: {escape(d.message, 300)}{where}")
    if len(diags) > MAX_DIAGNOSTICS:
        out.append(f"- ... {len(diags) - MAX_DIAGNOSTICS} more in the run's manifest")
    return out


def to_markdown(report: Report) -> str:
    """The report as Markdown (module docstring); ends with a newline."""
    s = summarize(report.analysis)
    end = report.ending
    parts = [f"## stepscope: {escape(report.run_path.name)}", ""]
    if end.cut_short:
        parts += [f"> **PARTIAL:** {escape(end.text)}", ""]
    elif end.text:
        parts += [f"> {escape(end.text)}", ""]
    sections = [_overview(report, s), _breakdown(s), _kernels(report), _findings(report),
                _remedies(report), _diagnostics(report)]
    for section in sections:
        if section:
            parts += [*section, ""]
    parts.append(f"<sub>stepscope {escape(__version__)}; run "
                 f"{escape(str(report.run_path))}</sub>")
    return "\n".join(parts) + "\n"
