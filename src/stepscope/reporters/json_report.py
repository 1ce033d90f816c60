"""The machine-readable report (``stepscope.report/1``): the stable twin of the terminal and HTML.

Contract (version 1; later versions only add keys):
  schema            "stepscope.report/1"
  run               path, source, tool, files, ranks, devices, partial, diagnostics,
                    step_detection, ending{text, cut_short, returncode} (how the program ended,
                    report.Ending), gpu_use (rank -> use, gpus, util_pct, util_samples, reason:
                    analysis.gpu_use), capture
  summary           steps, steady_steps, wall_ms (sum of step windows),
                    step_ms{mean,median,p95,min,max,cv}, gpu_busy_ms (whole trace, summed over
                    devices and ranks), gpu_busy_in_steps_ms (summed over devices and ranks),
                    gpu_busy_pct (pooled: busy / gpu_time_ms), gpu_time_ms (step windows x
                    devices used, summed over ranks), devices_used, gpu_use, kernels (count),
                    kernel_time_ms, tensor_core_share, est_sm_efficiency, step_source,
                    step_detail, marker_wall_ms and gpu_busy_in_markers_ms (on the source's
                    step markers)
  steps             [{rank, index, number, start_ns, end_ns, wall_ms (the step's window on the
                      GPU timeline), marker{start_ns, end_ns, wall_ms}, gpu_busy_ms, steady,
                      note, breakdown{category: ms}}]
  breakdown         category -> mean ms per steady step (sums to the mean step time)
  kernels           top kernels by time: name, calls, total/mean/median/min/max ms, share,
                    grid, block, registers, shared_memory, occupancy, occupancy_limiter,
                    sm_coverage, waves, tensor_cores, precision, category
  launches, syncs, copies, input   per-rank detail objects (see docs/report-json.md)
  input_pipeline    the TF Profiler's input-pipeline verdict: {verdict (highly | moderately |
                    not), text, input_bound_pct, rank, highly_above_pct, moderately_from_pct};
                    null where no input waits were recorded
  ranks             per-rank summaries
  collectives       across ranks (``reporters.ranks_view``): matched_by, matched, unmatched,
                    per rank {rank, step_ms, compute_ms, communication_ms, host_ms, wait_ms,
                    late_calls, calls}, groups [{op, name, pg, bytes, ranks, calls,
                    transfer_ms, wait_ms, busbw_gbs}], heat {steps, ranks, wait_ms[step][rank],
                    late[step]}; null for a run of one rank
  kernel_profiles   kernels profiled by Nsight Compute (null without): kernels [{rank, id,
                    name, grid, block, dur_us, ms_per_step, match, dram_gbs,
                    dram_pct_of_peak, gflops, intensity, achieved_occupancy,
                    theoretical_occupancy, registers, findings [{id, est_kernel_saving_pct,
                    title}]}], roofline {peak_dram_gbs, peak_fp32_gflops}
  findings          ranked advisor findings: id, category, severity, title, est_saving_ms,
                    est_saving_pct, method, evidence, fix{pytorch,tensorflow,jax,cuda}, where,
                    confidence, note, est_kernel_saving_pct (kernel findings), docs
  step_model        the step model's replay of one representative steady step (advisor.remedies):
                    {rank, step_index, measured_ms, replayed_ms, error_pct, host_busy_ms,
                    gpu_busy_ms, ranks [the same per fitted rank], calibration {rank,
                    source, untraced_step_ms, reached, scaled, factor, estimated_ms, min_ms,
                    max_ms}: to the step given with --untraced-step-ms, else to the steps
                    record timed after its window, else null}; null without steady
                    steps
  remedies          fixes replayed alone on the slowest rank's step model, by saving: id, title,
                    rank, finding_ids, predicted_step_ms, est_saving_ms, est_saving_pct, option,
                    options [{name, title, predicted_step_ms, est_saving_ms, assumptions}],
                    evidence, assumptions
  plan              every remedy that helps, replayed together: {rank, measured_ms,
                    predicted_step_ms, est_saving_ms, est_saving_pct, remedy_ids, options,
                    subsets [{remedy_ids, options, predicted_step_ms, est_saving_ms,
                    est_saving_pct}: the plan restricted to subsets, every pair at least]}; null
  skipped_rules     rules that could not run, with the reason
  host_trust        how far host-side timings can be trusted (profiler overhead estimate)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.advisor import Finding
from stepscope.analysis.summary import StepTimeStats, summarize
from stepscope.reporters.kernel_view import kernel_view
from stepscope.reporters.ranks_view import ranks_view
from stepscope.reporters.remedies_view import remedies_json
from stepscope.reporters.report import REPORT_SCHEMA, Report


def jsonable(obj: Any) -> Any:
    """Dataclasses, numpy values, enums, paths and tuples -> plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else round(obj, 6)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def _step_ms(st: StepTimeStats | None) -> dict[str, float] | None:
    if st is None:
        return None
    return {"mean": st.mean_ms, "median": st.median_ms, "p95": st.p95_ms, "min": st.min_ms,
            "max": st.max_ms, "cv": st.cv}


def finding_dict(f: Finding) -> dict[str, Any]:
    d = jsonable(f)
    assert isinstance(d, dict)
    d["docs"] = f"docs/rules/{f.id}.md"
    return d


def capture_info(m: Any) -> dict[str, Any]:
    """What a recorded run says about its own capture, per rank: the GPU backend's state and
    settings, and the overhead figures each process measured (see docs/record.md)."""
    ranks = (m.settings or {}).get("ranks") or {}
    return {"gpu": {k: (v or {}).get("gpu") for k, v in ranks.items()},
            "overhead": jsonable(m.overhead)}


def report_dict(report: Report) -> dict[str, Any]:
    a = report.analysis
    m = report.manifest
    s = summarize(a)
    steps = []
    for ra in a.ranks:
        for st, busy, bd in zip(ra.steps.steps, ra.step_busy_ns, ra.breakdown.per_step):
            w0, w1 = st.window
            steps.append({
                "rank": ra.rank, "index": st.index, "number": st.number,
                "start_ns": w0, "end_ns": w1, "wall_ms": _ms(st.span_ns),
                "marker": {"start_ns": st.start_ns, "end_ns": st.end_ns,
                           "wall_ms": _ms(st.wall_ns)},
                "gpu_busy_ms": _ms(busy), "steady": st.steady, "note": st.note,
                "breakdown": {c: _ms(v) for c, v in bd.items()},
            })
    kernels = []
    for ra in a.ranks:
        for k in ra.kernels:
            kernels.append({
                "rank": ra.rank, "name": k.name, "calls": k.calls, "total_ms": _ms(k.total_ns),
                "mean_ms": _ms(k.mean_ns), "median_ms": _ms(k.median_ns), "min_ms": _ms(k.min_ns),
                "max_ms": _ms(k.max_ns), "share": k.share, "grid": list(k.grid),
                "block": list(k.block), "registers": k.registers,
                "shared_memory": k.shared_memory, "occupancy": k.occupancy,
                "occupancy_limiter": k.occupancy_limiter, "sm_coverage": k.sm_coverage,
                "waves": k.waves, "tensor_cores": k.tensor_cores, "precision": k.precision,
                "category": k.category,
            })
    summary = {
        "steps": s.steps, "steady_steps": s.steady_steps, "wall_ms": s.wall_ms,
        "step_ms": _step_ms(s.step_time), "gpu_busy_ms": s.gpu_busy_ms,
        "gpu_busy_in_steps_ms": s.gpu_busy_in_steps_ms, "gpu_busy_pct": s.gpu_busy_pct,
        "kernels": s.kernels, "kernel_time_ms": s.kernel_time_ms,
        "tensor_core_share": s.tensor_core_share, "est_sm_efficiency": s.est_sm_efficiency,
        "step_source": s.step_source, "marker_wall_ms": s.marker_wall_ms,
        "gpu_busy_in_markers_ms": s.gpu_busy_in_markers_ms, "gpu_time_ms": s.gpu_time_ms,
        "devices_used": s.devices_used, "gpu_use": s.gpu_use, "step_detail": s.step_detail,
    }
    out: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "run": {
            "path": str(report.run_path), "source": m.source.kind, "tool": m.source.tool,
            "files": list(m.source.files), "created": m.created, "partial": m.partial,
            "ranks": [dataclasses.asdict(r) for r in m.ranks],
            "devices": [d for ra in a.ranks for d in ra.devices],
            "diagnostics": [dataclasses.asdict(d) for d in m.diagnostics],
            "step_detection": {str(ra.rank): ra.steps.detail for ra in a.ranks},
            "ending": report.ending,
            "frameworks": list(report.frameworks),
            "gpu_use": {str(ra.rank): ra.gpu for ra in a.ranks},
            "capture": capture_info(m) if m.source.kind == "capture" else None,
        },
        "summary": summary,
        "steps": steps,
        "breakdown": dict(s.breakdown_ms),
        "kernels": kernels,
        "launches": {str(ra.rank): ra.launches for ra in a.ranks},
        "syncs": {str(ra.rank): ra.syncs for ra in a.ranks},
        "copies": {str(ra.rank): ra.copies for ra in a.ranks},
        "input": {str(ra.rank): ra.input for ra in a.ranks},
        "input_pipeline": report.input_pipeline,
        "ranks": [dataclasses.asdict(r) for r in s.ranks],
        "collectives": _collectives(report) if len(a.ranks) > 1 else None,
        "kernel_profiles": kernel_view(report),
        "findings": [finding_dict(f) for f in report.advice.findings],
        **remedies_json(report.advice.remedies),
        "skipped_rules": [dataclasses.asdict(x) for x in report.advice.skipped],
        "host_trust": report.advice.host_trust,
    }
    result = jsonable(out)
    assert isinstance(result, dict)
    return result


def _collectives(report: Report) -> dict[str, Any]:
    v = ranks_view(report.analysis)
    return {"matched_by": v.matched_by, "matched": v.matched, "unmatched": v.unmatched,
            "ranks": v.rows, "groups": v.groups,
            "heat": {"steps": v.steps, "ranks": [r.rank for r in v.rows], "wait_ms": v.wait_ms,
                     "late": v.late}}


def to_json(report: Report, *, indent: int | None = 2) -> str:
    return json.dumps(report_dict(report), indent=indent, ensure_ascii=False)
