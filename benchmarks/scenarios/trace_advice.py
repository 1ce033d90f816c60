"""A profiler trace (torch.profiler's Chrome trace, JAX's XSpace) through stepscope's import,
analysis and advisor, in-process: the "profiler" leg of the planted suite. Torch-free, so that
the JAX scenarios' process never imports torch. The JSON report (``stepscope report --format
json``) is written beside the run (``RUN.report.json``) and its remedies, plan and step model
are returned with the findings (``remedy_score.remedy_fields``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def advise_trace(trace_path: Path, run_dir: Path,
                 untraced_step_ms: float | None = None) -> dict[str, Any]:
    """Import one trace into a run at ``run_dir``, analyse it, run the advisor (the remedies
    calibrated to ``untraced_step_ms`` when given). Returns plain data: findings (ranked),
    skipped rules, traced step time and a few summary figures."""
    from remedy_score import remedy_fields

    from stepscope.analysis.summary import summarize
    from stepscope.importers import import_traces
    from stepscope.reporters.json_report import report_dict
    from stepscope.reporters.report import build_report
    from stepscope.store.run import Run

    t0 = time.perf_counter()
    path = import_traces([trace_path], run_dir, overwrite=True)
    t1 = time.perf_counter()
    # analysis + advice, as `stepscope report [--untraced-step-ms MS]` makes them
    report = build_report(Run(path), untraced_step_ms=untraced_step_ms)
    analysis, advice = report.analysis, report.advice
    t2 = time.perf_counter()
    as_json = report_dict(report)
    report_path = Path(str(run_dir).rstrip("/") + ".report.json")
    report_path.write_text(json.dumps(as_json, ensure_ascii=False))
    summary = summarize(analysis)
    st = summary.step_time
    findings = [{
        "id": f.id, "category": f.category, "severity": getattr(f.severity, "value", str(f.severity)),
        "est_saving_ms": f.est_saving_ms, "est_saving_pct": f.est_saving_pct, "title": f.title,
        "confidence": getattr(f.confidence, "value", str(f.confidence)), "method": f.method,
        "note": f.note,
    } for f in advice.findings]
    return {
        "run": str(path),
        "findings": findings,
        "skipped": [{"id": s.id, "reason": s.reason} for s in advice.skipped],
        "host_trust": {"confidence": getattr(advice.host_trust.confidence, "value", ""),
                       "note": advice.host_trust.note,
                       "est_inflation_ms": advice.host_trust.est_inflation_ms},
        "traced": {
            "steps": summary.steps, "steady_steps": summary.steady_steps,
            "step_source": summary.step_source,
            "step_mean_ms": round(st.mean_ms, 4) if st else None,
            "step_median_ms": round(st.median_ms, 4) if st else None,
            "gpu_busy_pct": round(summary.gpu_busy_pct, 2),
            "kernels": summary.kernels,
            "breakdown_ms": {k: round(v, 4) for k, v in summary.breakdown_ms.items()},
        },
        "stepscope_s": {"import": round(t1 - t0, 3), "analyze_advise": round(t2 - t1, 3),
                        "json": round(time.perf_counter() - t2, 3)},
        "report": str(report_path),
        **remedy_fields(as_json),
    }
