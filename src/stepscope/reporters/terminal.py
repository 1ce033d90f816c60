"""The terminal summary (rich). Fits 100 columns. Trace names are always rendered as plain text."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from stepscope.analysis.breakdown import CATEGORIES
from stepscope.analysis.summary import RunSummary, summarize
from stepscope.errors import printable
from stepscope.reporters.kernel_view import KernelView, kernel_view
from stepscope.reporters.ranks_view import RanksView, ranks_view
from stepscope.reporters.remedies_view import fit_line, remedy_lines
from stepscope.reporters.report import Report, fix_for

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


def _header(report: Report, s: RunSummary) -> Text:
    m = report.manifest
    devs = {(d.get("name") or "GPU", d.get("compute_major"), d.get("compute_minor"), d.get("sm_count"),
             _links(d)) for ra in report.analysis.ranks for d in ra.devices}
    t = Text()
    t.append("stepscope", style="bold")
    t.append(f"  {m.source.kind} run, {len(m.ranks)} rank(s)")
    end = report.ending
    if end.cut_short:
        t.append(f"\nPARTIAL: {end.text}", style="bold red")
    elif end.text:
        t.append(f"\n{end.text[0].upper()}{end.text[1:]}", style="yellow")
    for name, major, minor, sms, links in sorted(devs, key=str):
        cc = f"CC {major}.{minor}, " if major is not None else ""
        if sms is None and not cc and not links:  # a source that knows the GPU by index only
            t.append(f"\n{name} (properties not recorded)")
            continue
        t.append(f"\n{name} ({cc}{sms if sms is not None else '?'} SMs{links})")
    numa = _numa_line(report)
    if numa:
        t.append("\n" + numa)
    if m.source.kind == "capture":
        t.append("\n" + _capture_line(m.settings or {}, m.overhead or {}), style="dim")
    return t


def _links(d: dict[str, Any]) -> str:
    """``"; NVLink 18 links 450 GB/s, PCIe 63 GB/s"`` (per direction), "" when unknown."""
    parts = []
    if d.get("nvlink_links"):
        gbs = f" {d['nvlink_gbs']:.0f} GB/s" if d.get("nvlink_gbs") else ""
        parts.append(f"NVLink {d['nvlink_links']} links{gbs}")
    if d.get("pcie_gbs"):
        parts.append(f"PCIe {d['pcie_gbs']:.0f} GB/s")
    return ("; " + ", ".join(parts) + " per direction") if parts else ""


def _numa_line(report: Report) -> str:
    """``"GPU NUMA nodes: rank 0 cuda:0 node 0, rank 1 cuda:1 node 1"``, "" when none is known."""
    parts = [f"rank {ra.rank} cuda:{d.get('device')} node {d['numa_node']}"
             for ra in report.analysis.ranks for d in ra.devices if d.get("numa_node") is not None]
    if not parts:
        return ""
    more = f", ... {len(parts) - 8} more" if len(parts) > 8 else ""
    return "GPU NUMA nodes: " + ", ".join(parts[:8]) + more


def _capture_line(settings: dict[str, Any], overhead: dict[str, Any]) -> str:
    """GPU backend per rank and the capture's cost each process measured: the in-window step
    time against the steps right after the window where the program ran on (samplers off,
    CUPTI detached). The steps *before* the window are never the reference: they ran with the
    host hooks and samplers on and are warm-up steps of the program (the default window opens
    after the first steps), so a ratio against them says how much faster the program became,
    not what the capture cost (x0.31 on a conv net). A ratio under 1 is no cost at all."""
    ranks = settings.get("ranks") or {}
    backends = sorted({str((v or {}).get("gpu", {}).get("backend") or "?") + " "
                       + str((v or {}).get("gpu", {}).get("state") or "?") for v in ranks.values()})
    line = "capture: GPU " + (", ".join(backends) or "none")
    worst = ", worst rank" if len([o for o in overhead.values() if isinstance(o, dict)]) > 1 else ""
    after = _ratios(overhead, "step_time_ratio_in_window_vs_after")
    why = [str(o["step_time_ratio_after_unmeasurable"]) for o in overhead.values()
           if isinstance(o, dict) and o.get("step_time_ratio_after_unmeasurable")]
    if why:
        line += f"; the capture's cost is not measurable on this run: {why[0]}"
    elif after and max(after) >= 1.0:
        line += (f"; steps in the window took x{max(after):.2f}{_interval(overhead)} the steps "
                 f"right after it (capture off{worst})")
    elif after:
        ci = _interval(overhead).strip().strip("()")
        line += (f"; no capture cost measurable: steps in the window were not slower than those "
                 f"right after it (x{max(after):.2f}{', ' + ci if ci else ''}{worst})")
    elif overhead:
        line += ("; the capture's cost was not measured (fewer than 3 steps ran after the "
                 "window to compare with)")
    return line


def _interval(overhead: dict[str, Any]) -> str:
    """The 90% interval of the worst rank's after-window ratio, as " (90% CI a-b)"."""
    ranks = [o for o in overhead.values() if isinstance(o, dict)
             and isinstance(o.get("step_time_ratio_in_window_vs_after"), (int, float))]
    if not ranks:
        return ""
    ci = max(ranks, key=lambda o: float(o["step_time_ratio_in_window_vs_after"])).get(
        "step_time_ratio_after_ci90")
    if not (isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)):
        return ""
    return f" (90% CI {ci[0]:.2f}-{ci[1]:.2f})"


def _ratios(overhead: dict[str, Any], key: str) -> list[float]:
    vals = [o.get(key) for o in overhead.values() if isinstance(o, dict)]
    return [float(v) for v in vals if isinstance(v, (int, float))]


def _gpu_busy(s: RunSummary) -> str:
    """GPU busy share with its own numerator and denominator: per rank, over the devices each
    rank used, and for several ranks the pooled share with each rank's figure."""
    if len(s.ranks) == 1:
        r = s.ranks[0]
        over = f" on {r.devices_used} GPUs" if r.devices_used > 1 else ""
        wall = f"{r.devices_used} x {r.wall_ms:.1f}" if r.devices_used > 1 else f"{r.wall_ms:.1f}"
        return f" of step time{over} ({r.gpu_busy_in_steps_ms:.1f} of {wall} ms)"
    per = [f"{r.rank}: {r.gpu_busy_pct:.1f}%" for r in s.ranks if r.devices_used]
    if len(per) > 8:
        pcts = [r.gpu_busy_pct for r in s.ranks if r.devices_used]
        per = [f"lowest {min(pcts):.1f}%, highest {max(pcts):.1f}%"]
    return (f" of step time over {len(s.ranks)} ranks ({s.gpu_busy_in_steps_ms:.1f} of "
            f"{s.gpu_time_ms:.1f} GPU-ms; per rank {', '.join(per)})")


def _input_line(report: Report) -> Text | None:
    """The TF Profiler's input-pipeline verdict, where input waits were recorded."""
    v = report.input_pipeline
    if v is None:
        return None
    t = Text("Input pipeline: ", style="bold")
    t.append(v.text, style="red" if v.verdict == "highly" else
             "yellow" if v.verdict == "moderately" else "")
    rank = f", rank {v.rank}" if len(report.analysis.ranks) > 1 else ""
    t.append(f" ({v.input_bound_pct:.1f}% of the step waiting for input{rank}; "
             f">{v.highly_above_pct:.0f}% highly, {v.moderately_from_pct:.0f}-"
             f"{v.highly_above_pct:.0f}% moderately)")
    return t


def _overview(s: RunSummary, ncu_launches: int = 0) -> Text:
    t = Text()
    t.append("Steps: ", style="bold")
    t.append(s.step_detail or "none (the run has no ranks)")
    if s.steps:
        t.append(f" ({s.steady_steps} steady)")
    if s.step_time is not None:
        st = s.step_time
        t.append("\nStep time ")
        t.append(f"{st.median_ms:.2f} ms", style="bold")
        t.append(f" median, {st.mean_ms:.2f} mean, {st.p95_ms:.2f} p95")
    if s.devices_used == 0:
        if ncu_launches:  # a run of Nsight Compute counters only: no timeline, by design
            t.append(f"\nGPU timeline: none in this run; it holds Nsight Compute counters of "
                     f"{ncu_launches} kernel launch{'es' if ncu_launches != 1 else ''} (below, "
                     "and `stepscope kernels RUN`)")
            return t
        notes = sorted({r.gpu_note for r in s.ranks if r.gpu_note})
        t.append("\nGPU activity: none recorded" + (f": {notes[0]}" if notes else ""))
        return t
    t.append("\nGPU busy ")
    t.append(f"{s.gpu_busy_pct:.1f}%", style="bold")
    t.append(_gpu_busy(s))
    t.append(f"\nKernels {s.kernels} ({s.kernel_time_ms:.1f} ms)")
    if s.kernel_time_ms > 0:
        t.append(f"   tensor cores {s.tensor_core_share:.0%} of kernel time")
        if s.est_sm_efficiency is not None:
            t.append(f"   est. SM efficiency {s.est_sm_efficiency:.0%}")
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
        out.append(Text("Findings (ranked by estimated saving per step)", style="bold"))
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
        _header(report, s), Text(),
        _overview(s, int(report.manifest.tables.get("kernel_metrics", 0))), Text()]
    verdict = _input_line(report)
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
