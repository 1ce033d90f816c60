"""record_suite.py's outputs: condensed reports, the accuracy tables, merging, the bundle.

Pure functions of the per-scenario results (plain dicts, see ``record_suite.run_scenario``),
so a suite split over two device calls is merged without a GPU (``--merge``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import remedy_report
from remedy_score import remedy_fields
from timing import SCENARIOS, TABLES

TABLE_ORDER = tuple(dict.fromkeys(TABLES.values()))
FINDING_KEYS = ("id", "severity", "est_saving_ms", "est_saving_pct", "confidence", "title")


# ---------------------------------------------------------------------------------------------
# Small file helpers


def tree_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def program_line(log: Path) -> str | None:
    """program.py's closing line (steps run, ms/step), if it printed one."""
    return next((ln for ln in reversed(_lines(log)) if ln.startswith("program.py:")), None)


def program_ms(line: str | None) -> float | None:
    """The ms/step of program.py's closing line."""
    import re

    m = re.search(r"([0-9.]+) ms/step", line or "")
    return float(m.group(1)) if m else None


MS_PER_STEP = re.compile(r"([0-9.]+) ms/step")
STEADY = re.compile(r"program\.py: steady: ([0-9.]+) ms/step")


def ms_per_step(text: str) -> float | None:
    """The ms/step of program.py's closing line (the last one in ``text``)."""
    found = MS_PER_STEP.findall(text)
    return float(found[-1]) if found else None


def steady_ms(text: str) -> float | None:
    """program.py's steady ms/step (``--warmup-steps``), else its closing line's."""
    found = STEADY.findall(text)
    return float(found[-1]) if found else ms_per_step(text)


def program_steady_ms(log: Path) -> float | None:
    """:func:`steady_ms` of a program.py log."""
    return steady_ms("\n".join(_lines(log)))


def last_lines(log: Path, n: int = 3, width: int = 300) -> str:
    return " | ".join(_lines(log)[-n:])[-width:]


# ---------------------------------------------------------------------------------------------
# Condensing the two paths' advice


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    return {k: f.get(k) for k in FINDING_KEYS}


def condense_report(report: dict[str, Any]) -> dict[str, Any]:
    """What results.json keeps of a recorded run's JSON report (stepscope.report/1)."""
    s = report.get("summary") or {}
    run = report.get("run") or {}
    step_ms = s.get("step_ms") or {}
    return {
        "findings": [_finding(f) for f in report.get("findings", [])],
        "skipped": [{"id": x.get("id"), "reason": x.get("reason")}
                    for x in report.get("skipped_rules", [])],
        "summary": {"steps": s.get("steps"), "steady_steps": s.get("steady_steps"),
                    "step_source": s.get("step_source"), "step_mean_ms": step_ms.get("mean"),
                    "step_median_ms": step_ms.get("median"),
                    "gpu_busy_pct": s.get("gpu_busy_pct"), "kernels": s.get("kernels"),
                    "tensor_core_share": s.get("tensor_core_share")},
        "step_detection": run.get("step_detection"),
        "devices": [d.get("name") for d in run.get("devices") or [] if isinstance(d, dict)],
        "partial": run.get("partial"),
        "diagnostics": [{"level": d.get("level"), "code": d.get("code"),
                         "message": str(d.get("message", ""))[:300]}
                        for d in run.get("diagnostics") or []
                        if d.get("level") in ("warning", "error")],
        "analyze_advise_s": (report.get("suite") or {}).get("analyze_advise_s"),
        **remedy_fields(report),
    }


def condense_advice(advice: dict[str, Any] | None) -> dict[str, Any]:
    """The same for run.py's profiler-trace advice (``trace_advice.advise_trace``: torch.profiler
    for PyTorch, jax.profiler's XSpace for JAX)."""
    if not advice:
        return {}
    keep = ("remedies", "plan", "plans", "step_model", "captured_step_ms", "captured_from",
            "report")
    return {"findings": [_finding(f) for f in advice.get("findings", [])],
            "skipped": advice.get("skipped", []), "traced": advice.get("traced"),
            **{k: advice[k] for k in keep if k in advice}}


# ---------------------------------------------------------------------------------------------
# Environment


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cuda" if shutil.which("nvidia-smi") else "cpu"


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cmd(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def suite_meta(args: Any, argv: list[str]) -> dict[str, Any]:
    """Device, driver, versions, commit, date and the exact command (no CUDA context made)."""
    here = Path(__file__).resolve().parent
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join(argv), "device": args.device, "rounds": args.rounds,
        "steps": args.steps, "warmup": args.warmup, "inflight": args.inflight,
        "program_seconds": args.program_seconds, "scenarios": list(args.names),
        "versions": {k: _version(*d) for k, d in (
            ("torch", ("torch",)), ("jax", ("jax",)), ("jaxlib", ("jaxlib",)),
            ("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy")), ("triton", ("triton",)),
            ("numpy", ("numpy",)))},
    }
    smi = _cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader"])
    if smi and args.device.startswith("cuda"):
        first = [x.strip() for x in smi.splitlines()[0].split(",")]
        meta.update(device_name=first[0], driver=first[1] if len(first) > 1 else None,
                    gpu_memory=first[2] if len(first) > 2 else None)
    commit = _cmd(["git", "rev-parse", "--short", "HEAD"], here)
    if commit and _cmd(["git", "status", "--porcelain", "--untracked-files=no"], here):
        commit += " (with uncommitted changes)"
    meta["commit"] = commit or "unknown"
    return meta


# ---------------------------------------------------------------------------------------------
# The table


def _pct(x: Any, nd: int = 1) -> str:
    return "–" if x is None else f"{x:.{nd}f}%"


def _esc(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _path_result(r: dict[str, Any], path: str) -> dict[str, Any]:
    return r.get("record" if path == "record" else "profiler") or {}


def top_cell(r: dict[str, Any], path: str) -> str:
    p = _path_result(r, path)
    if p.get("status") == "n/a":
        return f"n/a ({_esc(p.get('why', ''))})"
    if str(p.get("status", "")).startswith("not run"):
        return "not run"
    sc = (r.get("score") or {}).get(path) or {}
    if not sc.get("has_report"):
        return "no report: " + _esc(p.get("error") or "?")[:90]
    if sc.get("top"):
        return f"{sc['top']} ({sc['top_severity']})"
    return f"none ({sc.get('findings', 0)} info)" if sc.get("findings") else "none"


def est_cell(r: dict[str, Any], path: str) -> str:
    sc = (r.get("score") or {}).get(path)
    if not sc or not sc.get("has_report"):
        return "–"
    if not r.get("expected"):
        return "–"
    if sc.get("est_saving_pct") is None:
        return "not found"
    meas = (r.get("timing") or {}).get("saving_pct")
    ratio = sc.get("ratio_pct")
    verdict = "" if ratio is None else f" = {ratio:.2f} {'ok' if sc['within_tolerance'] else 'off'}"
    return f"{_pct(sc['est_saving_pct'])} / {_pct(meas)}{verdict}"


def first_cell(r: dict[str, Any], path: str) -> str:
    sc = (r.get("score") or {}).get(path)
    if not sc:
        return "–"
    if not sc.get("has_report"):
        return "no report"
    if not r.get("expected"):
        return "pass" if sc.get("passed") else f"FAIL ({sc.get('warn_crit')} warning/critical)"
    if sc.get("ranked_first"):
        return "yes"
    if sc.get("expected_rank"):
        return f"no ({r['expected']} #{sc['expected_rank']}, {sc.get('expected_severity')})"
    return "no (absent)"


def steps_cell(r: dict[str, Any]) -> str:
    rec = r.get("record") or {}
    s = rec.get("summary") or {}
    if s.get("steps") is None:
        return "–"
    return f"{s['steps']} ({_esc(s.get('step_source') or '?')})"


def row(r: dict[str, Any]) -> str:
    name, exp = r["scenario"], r.get("expected") or "(healthy)"
    if r.get("status") == "skipped":
        return f"| {name} | {exp} | skipped: {_esc(r.get('reason', ''))[:100]} | | | | | | |"
    if r.get("status") == "error" and not r.get("timing"):
        return f"| {name} | {exp} | ERROR: {_esc(r.get('error', '?'))[:100]} | | | | | | |"
    t = r.get("timing") or {}
    measured = (f"{t['saving_ms']:.2f} / {t['saving_pct']:.1f}% ({t['baseline_ms']:.2f} → "
                f"{t['fixed_ms']:.2f})" if t else "not measured")
    firsts = f"{first_cell(r, 'record')} / {first_cell(r, 'profiler')}"
    return (f"| {name} | {exp} | {top_cell(r, 'record')} | {top_cell(r, 'profiler')} | "
            f"{est_cell(r, 'record')} | {est_cell(r, 'profiler')} | {firsts} | {measured} | "
            f"{steps_cell(r)} |")


def totals(rows: list[dict[str, Any]], path: str) -> str:
    scored = [r for r in rows if (r.get("score") or {}).get(path) is not None]
    planted = [r for r in scored if r.get("expected")]
    healthy = [r for r in scored if not r.get("expected")]
    first = sum(1 for r in planted if r["score"][path].get("ranked_first"))
    tol = sum(1 for r in planted if r["score"][path].get("within_tolerance"))
    text = f"ranked first {first}/{len(planted)}, estimate within ±30% {tol}/{len(planted)}"
    if healthy:
        ok = sum(1 for r in healthy if r["score"][path].get("passed"))
        text += f", healthy without warning/critical {ok}/{len(healthy)}"
    return text


HEADER = ("| scenario | planted rule | top finding via record | via profiler trace | "
          "est. / measured via record | via profiler trace | ranked first? record / profiler | "
          "measured saving ms / % (baseline → fixed ms) | record: steps (how found) |")


def accuracy_md(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    v = meta.get("versions") or {}
    lines = [
        "# Planted-bottleneck suite through `stepscope record`", "",
        (f"Device: {meta.get('device_name', meta.get('device'))}; driver {meta.get('driver')}; "
         f"torch {v.get('torch')}, JAX {v.get('jax')}, CuPy {v.get('cupy')}, Triton "
         f"{v.get('triton')}; {meta.get('date')}; commit {meta.get('commit')}."),
        f"Command: `{meta.get('command')}`" + (
            f" (merged: {'; '.join(m.get('command', '?') for m in meta['merged_from'])})"
            if meta.get("merged_from") else ""),
        *([f"Re-scored: {meta['rescored']}."] if meta.get("rescored") else []),
        "",
        ("Measured: baseline and fixed timed interleaved in one process, untraced (median block "
         "step time). Record: `stepscope record -o RUN --quiet -- python program.py NAME` "
         "(default window), then the advisor. Profiler trace: the baseline traced in the "
         "timing process, imported, advised: torch.profiler (CPU+CUDA, 5 active steps) for "
         "PyTorch, jax.profiler (XSpace, 8 steps in StepTraceAnnotation) for JAX; n/a for "
         "CuPy. Top finding = the "
         "first warning/critical finding. est. / measured = the planted rule's est_saving_pct "
         "(share of the captured step) / the measured saving (share of the untraced baseline "
         "step); ok = within ±30%."),
    ]
    for table in TABLE_ORDER + tuple(sorted({r.get("table", "") for r in results}
                                            - set(TABLE_ORDER))):
        rows = [r for r in results if r.get("table") == table]
        if not rows:
            continue
        lines += ["", f"## {table}", "", HEADER, "|---|---|---|---|---|---|---|---|---|"]
        lines += [row(r) for r in rows]
        lines += ["", (f"Record: {totals(rows, 'record')}. Profiler trace: "
                       f"{totals(rows, 'profiler')}.")]
        lines += remedy_report.remedies_md(rows, table)
    lines += ["", (f"**All: record {totals(results, 'record')}; profiler trace "
                   f"{totals(results, 'profiler')}.**")]
    if any(r.get("remedy_score") for r in results):
        lines += ["", (f"**Remedies, all: via record "
                       f"{remedy_report.totals_text(results, 'record')}; via profiler trace "
                       f"{remedy_report.totals_text(results, 'profiler')}.**"), "",
                  remedy_report.INTRO]
    lines += ["", "## Details", ""]
    lines += [detail(r) for r in results if detail(r)]
    lines.append("")
    return "\n".join(lines)


def _findings_text(fs: list[dict[str, Any]] | None) -> str:
    if not fs:
        return "none"
    return "; ".join(f"{f['id']} {f['severity']} {f.get('est_saving_ms') or 0:.2f} ms "
                     f"({f.get('est_saving_pct') or 0:.1f}%)" for f in fs)


def detail(r: dict[str, Any]) -> str:
    if r.get("status") == "skipped":
        return ""
    parts = []
    rec = r.get("record") or {}
    if rec.get("error"):
        parts.append(f"record error: {_esc(rec['error'])}")
    if "findings" in rec:
        parts.append(f"record findings: {_findings_text(rec['findings'])}")
        exp_skip = [s for s in rec.get("skipped", []) if s.get("id") == r.get("expected")]
        if exp_skip:
            parts.append(f"record skipped {exp_skip[0]['id']}: {_esc(exp_skip[0]['reason'])}")
        for d in rec.get("diagnostics", [])[:4]:
            parts.append(f"record {d['level']} {d['code']}: {_esc(d['message'])}")
        if rec.get("step_detection"):
            parts.append("steps: " + _esc("; ".join(map(str, rec["step_detection"].values()))))
        if rec.get("program_line"):
            parts.append(_esc(rec["program_line"]))
            prog, base = program_ms(rec["program_line"]), (r.get("timing") or {}).get(
                "baseline_ms")
            if prog and base:  # the recorded loop and the timed loop should agree
                parts.append(f"program loop / timed baseline {prog:.2f} / {base:.2f} ms = "
                             f"{prog / base:.2f}")
        parts.append(f"record {rec.get('wall_s')} s, advisor {rec.get('advise_wall_s')} s "
                     f"(analysis {rec.get('analyze_advise_s')} s), run "
                     f"{rec.get('run_bytes', 0) / 2**20:.1f} MiB")
    th = r.get("timing_harness")
    if th:
        parts.append(f"measured saving from program.py's own loop "
                     f"({(r.get('timing') or {}).get('rounds')} alternating rounds); in-process "
                     f"harness: {th.get('baseline_ms')} -> {th.get('fixed_ms')} ms "
                     f"({th.get('saving_pct')}%)")
    if r.get("program_timing_error"):
        parts.append(f"program timing failed: {_esc(r['program_timing_error'])}")
    prof = r.get("profiler") or {}
    if "findings" in prof:
        parts.append(f"profiler-trace findings: {_findings_text(prof['findings'])}")
    if prof.get("error"):
        parts.append(f"profiler-trace error: {_esc(prof['error'])}")
    if r.get("error"):
        parts.append(f"ERROR: {_esc(r['error'])}")
    info = (r.get("info") or {}).get("baseline")
    if info:
        parts.append("baseline: " + _esc(json.dumps(info, default=str))[:200])
    return f"- **{r['scenario']}**: " + "; ".join(parts) if parts else ""


def summary_line(r: dict[str, Any]) -> str:
    if r.get("status") == "skipped":
        return f"skipped: {r.get('reason')}"
    t = r.get("timing")
    if not t:
        return f"ERROR: {r.get('error') or (r.get('torch_child') or {}).get('error')}"
    head = (f"measured {t['baseline_ms']:.2f} -> {t['fixed_ms']:.2f} ms "
            f"({t['saving_pct']:.1f}%)")
    parts = [head]
    for path in ("record", "profiler"):
        sc = (r.get("score") or {}).get(path)
        if sc is None:
            continue
        verdict = "PASS" if sc.get("passed") else "FAIL"
        est = "" if not r.get("expected") else (
            f" est {_pct(sc.get('est_saving_pct'))} ({sc.get('ratio_pct')})")
        parts.append(f"{path}: {verdict} top {sc.get('top') or 'none'}{est}")
    return " | ".join(parts) + f"  [{r.get('wall_s')} s]"


# ---------------------------------------------------------------------------------------------
# Writing, merging, bundling


def write_outputs(out: Path, results: list[dict[str, Any]], meta: dict[str, Any],
                  copy_to: Path | None = None) -> None:
    (out / "results.json").write_text(json.dumps({"meta": meta, "scenarios": results},
                                                 indent=1, default=str))
    (out / "accuracy.md").write_text(accuracy_md(results, meta))
    if copy_to:
        copy_to.mkdir(parents=True, exist_ok=True)
        for f in ("results.json", "accuracy.md"):
            shutil.copy2(out / f, copy_to / f)


def merge(dirs: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Results of several suite folders (or results.json files): later ones win per scenario;
    report order is the registry's."""
    by_name: dict[str, dict[str, Any]] = {}
    metas: list[dict[str, Any]] = []
    for d in dirs:
        f = d if d.suffix == ".json" else d / "results.json"
        data = json.loads(f.read_text())
        metas.append(data.get("meta", {}))
        for r in data.get("scenarios", []):
            by_name[r["scenario"]] = r
    order = {n: i for i, n in enumerate(SCENARIOS)}
    results = sorted(by_name.values(), key=lambda r: order.get(r["scenario"], len(order)))
    meta = dict(metas[0]) if metas else {}
    meta["merged_from"] = [{k: m.get(k) for k in ("date", "command", "device_name", "driver",
                                                  "commit")} for m in metas]
    devices = {m.get("device_name") for m in metas}
    if len(devices) > 1:
        meta["warning"] = f"merged runs come from different devices: {sorted(map(str, devices))}"
    meta["command"] = "record_suite.py --merge"
    return meta, results
