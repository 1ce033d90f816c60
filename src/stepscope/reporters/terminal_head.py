"""The head of the terminal summary (rich): the run, its GPUs and capture, then the overview
(steps, step time, GPU busy, kernels) and the input-pipeline verdict. Trace names are plain text."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from stepscope.analysis.summary import RunSummary
from stepscope.reporters.report import Report


def header(report: Report, s: RunSummary) -> Text:
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
        t.append("\n" + capture_line(m.settings or {}, m.overhead or {}), style="dim")
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


def capture_line(settings: dict[str, Any], overhead: dict[str, Any]) -> str:
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


def input_line(report: Report) -> Text | None:
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


def overview(s: RunSummary, ncu_launches: int = 0) -> Text:
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
