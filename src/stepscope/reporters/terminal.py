"""The terminal summary (rich). Fits 100 columns. Trace names are always rendered as plain text."""

from __future__ import annotations

import io

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from stepscope.analysis.breakdown import CATEGORIES
from stepscope.analysis.summary import RunSummary, summarize
from stepscope.errors import printable
from stepscope.reporters.kernel_view import KernelView, kernel_view
from stepscope.reporters.ranks_view import RanksView, ranks_view
from stepscope.reporters.remedies_view import fit_line, remedy_lines, replayed_fixes
from stepscope.reporters.report import Report, fix_for
from stepscope.reporters.terminal_head import header, input_line, overview

WIDTH = 100
BAR = 72
STYLE = {
    "compute": "green", "communication": "magenta", "copies": "cyan", "input_wait": "red",
    "sync": "yellow", "launch": "bright_blue", "host": "blue", "idle": "bright_black",
}
LABEL = {
    "compute": "GPU compute", "communication": "exposed comm", "copies": "exposed copies",
    "input_wait": "input wait", "sync": "sync", "launch": "launch", "host": "host work",
    "idle": "idle (unattributed)",
}


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def breakdown_bar(breakdown_ms: dict[str, float], width: int = BAR) -> Text:
    """One line of coloured blocks, each category's width proportional to its time."""
    total = sum(breakdown_ms.values())
    bar = Text()
    if total <= 0:
        return Text("(no steps)")
    # largest-remainder rounding so the cells add up to the width exactly
    exact = {c: breakdown_ms.get(c, 0.0) / total * width for c in CATEGORIES}
    cells = {c: int(v) for c, v in exact.items()}
    for c in sorted(CATEGORIES, key=lambda c: exact[c] - cells[c], reverse=True)[
        : width - sum(cells.values())
    ]:
        cells[c] += 1
    for c in CATEGORIES:
        bar.append("█" * cells[c], style=STYLE[c])
    return bar


# a run without GPU records: every category is host time (analysis.breakdown)
HOST_LABEL = {**LABEL, "host": "host ops", "idle": "host, nothing recorded"}


def _legend(s: RunSummary, width: int = WIDTH) -> Text:
    """Category labels with ms and share, wrapped between items (never inside one)."""
    total = sum(s.breakdown_ms.values())
    labels = LABEL if s.devices_used else HOST_LABEL
    t = Text()
    used = 0
    for c in CATEGORIES:
        v = s.breakdown_ms.get(c, 0.0)
        if v <= 0 or total <= 0:
            continue
        item = f"{labels[c]} {v:.2f} ms ({v / total:.0%})"
        if used and used + len(item) + 5 > width:
            t.append("\n")
            used = 0
        t.append("■ ", style=STYLE[c])
        t.append(item + "   ")
        used += len(item) + 5
    return t


def _kernels(report: Report, limit: int) -> Table:
    tab = Table(title="Top kernels (steady-state steps)", title_justify="left", expand=False,
                show_edge=False, pad_edge=False, box=None, header_style="bold")
    tab.add_column("kernel", width=42, no_wrap=True, overflow="ellipsis")
    tab.add_column("calls", justify="right", min_width=5)
    tab.add_column("total ms", justify="right", min_width=8)
    tab.add_column("share", justify="right", min_width=5)
    tab.add_column("blocks", justify="right", min_width=7)
    tab.add_column("occ.", justify="right", min_width=4)
    tab.add_column("type", no_wrap=True, overflow="ellipsis", max_width=22)
    rows = [k for ra in report.analysis.ranks for k in ra.kernels]
    rows.sort(key=lambda k: k.total_ns, reverse=True)
    for k in rows[:limit]:
        occ = f"{k.occupancy:.0%}" if k.occupancy is not None else "-"
        kind = k.category + (f" {k.precision}" if k.precision else "")
        if k.tensor_cores:
            kind += " TC"
        tab.add_row(Text(_short(k.name, 42)), str(k.calls), f"{k.total_ns / 1e6:.2f}",
                    f"{k.share:.0%}", str(k.blocks), occ, Text(kind))
    return tab


def _profiled(view: KernelView, limit: int = 10) -> Table:
    tab = Table(title="Profiled kernels (Nsight Compute)", title_justify="left", expand=False,
                show_edge=False, pad_edge=False, box=None, header_style="bold")
    tab.add_column("kernel", width=30, no_wrap=True, overflow="ellipsis")
    tab.add_column("ms/step", justify="right", min_width=7)
    tab.add_column("us ncu", justify="right", min_width=7)
    tab.add_column("DRAM", justify="right", min_width=5)
    tab.add_column("GFLOP/s", justify="right", min_width=7)
    tab.add_column("occ.", justify="right", min_width=7)
    tab.add_column("finding", no_wrap=True, overflow="ellipsis", max_width=30)
    for k in view.kernels[:limit]:
        occ = "-"
        if k.achieved_occupancy is not None and k.theoretical_occupancy is not None:
            occ = f"{k.achieved_occupancy:.0%}/{k.theoretical_occupancy:.0%}"
        top = k.findings[0] if k.findings else None
        what = "-" if top is None else (
            top.id.removeprefix("kernel_") + (f" -{top.est_kernel_saving_pct:.0f}%"
                                              if top.est_kernel_saving_pct is not None else ""))
        tab.add_row(Text(_short(k.name, 30)),
                    "-" if k.ms_per_step is None else f"{k.ms_per_step:.3f}",
                    f"{k.dur_us:.1f}",
                    "-" if k.dram_pct_of_peak is None else f"{k.dram_pct_of_peak:.0%}",
                    "-" if k.gflops is None else f"{k.gflops:,.0f}", occ, Text(what))
    return tab


MAX_RANK_ROWS = 16


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ranks(view: RanksView) -> list[RenderableType]:
    """Per rank: its step and breakdown, its waits inside collectives and how often it was
    the late rank; then the collectives by transfer time."""
    tab = Table(title="Ranks (mean of steady steps, ms)", title_justify="left", expand=False,
                show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in ("rank", "step", "compute", "exposed comm", "GPU idle", "waiting", "late at"):
        tab.add_column(name, justify="right")
    rows = sorted(view.rows, key=lambda r: -(r.step_ms or 0.0))
    for r in rows[:MAX_RANK_ROWS]:
        late = "-" if r.late_calls is None else f"{r.late_calls}/{r.calls}"
        tab.add_row(str(r.rank), _fmt(r.step_ms), _fmt(r.compute_ms),
                    _fmt(r.communication_ms), _fmt(r.host_ms), _fmt(r.wait_ms), late)
    out: list[RenderableType] = [tab]
    if len(rows) > MAX_RANK_ROWS:
        out.append(Text(f"   ... {len(rows) - MAX_RANK_ROWS} more ranks in the JSON report",
                        style="dim"))
    out.append(Text("   waiting: inside collectives for a later rank, per step; late at: "
                    "matched collectives the rank arrived last at", style="dim"))
    if view.groups:
        col = Table(title=f"Collectives ({view.matched} matched across ranks by "
                          f"{view.matched_by})", title_justify="left", expand=False,
                    show_edge=False, pad_edge=False, box=None, header_style="bold")
        col.add_column("op", no_wrap=True, overflow="ellipsis", max_width=18)
        for name in ("MB", "ranks", "calls", "transfer ms", "wait ms", "bus GB/s"):
            col.add_column(name, justify="right")
        for g in view.groups[:6]:
            col.add_row(Text(g.op), "-" if g.bytes is None else f"{g.bytes / 1e6:.1f}",
                        str(g.ranks), str(g.calls), f"{g.transfer_ms:.3f}", f"{g.wait_ms:.3f}",
                        "-" if g.busbw_gbs is None else f"{g.busbw_gbs:.0f}")
        out += [Text(), col]
    return out


SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}


def _findings(report: Report, limit: int = 6) -> list[RenderableType]:
    adv = report.advice
    frameworks = report.frameworks
    out: list[RenderableType] = []
    if not adv.findings:
        out.append(Text("Findings: none above the reporting thresholds.", style="bold"))
    else:
        out.append(Text("Findings (ranked by estimated saving per step, each its symptom's own: "
                        "they overlap)", style="bold"))
        for i, f in enumerate(adv.findings[:limit], 1):
            line = Text(f"{i}. ")
            line.append(f"[{f.severity.value}]", style=SEV_STYLE[f.severity.value])
            line.append(f" {f.title}")
            conf = "" if f.confidence.value == "high" else f", {f.confidence.value} confidence"
            saving = (f"save ~{f.est_saving_ms:.2f} ms/step, {f.est_saving_pct:.0f}%"
                      if f.est_saving_ms > 0 else "saving not estimated")
            if f.est_kernel_saving_pct is not None:
                kernel = f"~{f.est_kernel_saving_pct:.0f}% of the kernel's time"
                saving = f"{saving}; {kernel}" if f.est_saving_ms > 0 else kernel
            line.append(f"  ({saving}{conf})", style="bold")
            out.append(line)
            fixed = replayed_fixes(adv.remedies, f.id)
            if fixed:
                out.append(Text(f"   {fixed}", style="cyan"))
            fix = fix_for(f.fix, frameworks)
            if fix:
                out.append(Text(f"   fix: {_short(fix.splitlines()[0], WIDTH - 8)}", style="green"))
        if len(adv.findings) > limit:
            out.append(Text(f"   ... {len(adv.findings) - limit} more in the JSON report", style="dim"))
    if adv.host_trust.note:
        out.append(Text(f"Note: {adv.host_trust.note}", style="yellow"))
    return out


def render(report: Report, *, top_kernels: int = 8) -> Group:
    s = summarize(report.analysis)
    parts: list[RenderableType] = [
        header(report, s), Text(),
        overview(s, int(report.manifest.tables.get("kernel_metrics", 0))), Text()]
    verdict = input_line(report)
    if verdict is not None:
        parts[-1:-1] = [verdict]
    if s.step_time is not None:
        title = "Where a step's time goes (mean of steady steps)"
        if not s.devices_used:
            title += ": all host time, no GPU activity recorded"
        parts += [Text(title, style="bold"), breakdown_bar(s.breakdown_ms), _legend(s), Text()]
    if len(report.analysis.ranks) > 1:
        parts += [*_ranks(ranks_view(report.analysis)), Text()]
    if s.kernels:
        parts += [_kernels(report, top_kernels), Text()]
    view = kernel_view(report)
    if view is not None and view.kernels:
        parts += [_profiled(view), Text()]
    parts += _findings(report)
    fit = fit_line(report.advice.remedies)
    rem = remedy_lines(report.advice.remedies)
    if rem:
        parts += [Text(), *rem]
    if fit is not None:
        parts.append(fit)
    diags = report.manifest.diagnostics
    if diags:
        parts.append(Text("\nDiagnostics", style="bold"))
        for d in diags[:8]:
            parts.append(Text(f"- {d.level}: {d.message}" + (f" ({d.file})" if d.file else "")))
    parts.append(Text(f"\nRun: {report.run_path}", style="dim"))
    return Group(*parts)


def console_for_stdout() -> Console:
    """100 columns, or fewer on a narrower terminal."""
    probe = Console()
    return Console(width=min(WIDTH, probe.width) if probe.is_terminal else WIDTH)


def printable_renderable(renderable: RenderableType) -> RenderableType:
    """``renderable`` with the control characters of its text escaped (``errors.printable``):
    kernel, file and thread names come from traces, and an escape sequence in one must not
    reach the terminal (rich styles are not text, so the report's own colours stay)."""
    return _Printable(renderable)


class _Printable:
    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.renderable, options):
            if seg.control is None and seg.text:
                text = printable(seg.text)
                yield seg if text == seg.text else Segment(text, seg.style)
            else:
                yield seg


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or console_for_stdout()
    console.print(printable_renderable(render(report)))


def render_text(report: Report, width: int = WIDTH) -> str:
    """The summary as plain text (no colour), e.g. for tests and report.txt."""
    console = Console(width=width, record=True, color_system=None, file=io.StringIO(),
                      force_jupyter=False)  # text only: never a display in a notebook
    console.print(printable_renderable(render(report)))
    return console.export_text()
