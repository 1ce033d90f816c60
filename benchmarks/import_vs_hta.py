#!/usr/bin/env python3
"""Import + analysis: stepscope vs Holistic Trace Analysis (HTA), side by side, same file.

Each measurement runs in a FRESH subprocess (optionally in its own interpreter / virtualenv),
so the numbers are that tool's own:

* wall s      -- from spawning the child to its exit, as the parent sees it (includes the
                 interpreter start and the tool's imports, like a CLI run would);
* work s      -- what the child timed around the tool's calls only (load + analysis);
* peak RSS    -- ``ru_maxrss`` from ``os.wait4`` on the child: the largest resident set of the
                 child or of any process it waited for (HTA may parse in a forked pool worker);
* tree RSS    -- peak of the SUM of RSS over the child and all its descendants, sampled every
                 ``--sample-ms`` from /proc (catches a parent + worker holding data together);
* CPU s       -- user + sys of the child and its waited-for descendants (``os.wait4``);
                 cores used = CPU s / wall s.

MB are 10^6 bytes of *uncompressed* trace JSON. "MB/s per core" = MB / CPU s, i.e. throughput
per core actually used (equal to MB/s for a single-threaded tool).

stepscope side:  ``stepscope.importers.import_traces([trace], tmp/run)`` then
                 ``stepscope.analysis.analyze(stepscope.store.Run(tmp/run))``.
HTA side:        ``hta.trace_analysis.TraceAnalysis(trace_dir=DIR)`` then
                 ``analyzer.get_temporal_breakdown(visualize=False)``; DIR is a private folder
                 holding only a symlink to the trace (HTA loads every *.json / *.gz in DIR).

The parent needs only the standard library. Example::

    python3 benchmarks/import_vs_hta.py --trace /tmp/bench/x120/gpt_x120.pt.trace.json \\
        --repeats 3 --stepscope-python .venv/bin/python \\
        --hta-python /tmp/htavenv/bin/python --json /tmp/bench/results.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TOOLS = ("stepscope", "hta")
_PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------------------------
# child side: runs ONE tool once, writes a JSON result file
# --------------------------------------------------------------------------------------------


def _versions(dists: list[str]) -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = "not installed"
    return out


def _child_stepscope(trace: str, workdir: str) -> dict[str, Any]:
    t_imp = time.perf_counter()
    try:
        from stepscope.analysis import analyze
        from stepscope.importers import import_traces
        from stepscope.store import Run
    except ImportError as exc:
        raise _ChildUnavailable(
            "stepscope side unavailable: needs stepscope.importers.import_traces and "
            f"stepscope.analysis.analyze (not importable yet: {exc}). Install the package into "
            "the --stepscope-python interpreter (pip install -e .) once the importer has landed."
        ) from exc
    imports_s = time.perf_counter() - t_imp
    run_dir = os.path.join(workdir, "run")
    t0 = time.perf_counter()
    import_traces([trace], run_dir)
    t1 = time.perf_counter()
    result = analyze(Run(run_dir))
    t2 = time.perf_counter()
    summary = repr(result)
    return {
        "imports_s": imports_s,
        "load_s": t1 - t0,
        "analysis_s": t2 - t1,
        "work_s": t2 - t0,
        "result_summary": summary[:2000],
        "versions": _versions(["stepscope", "numpy", "pyarrow", "duckdb", "msgspec", "orjson"]),
    }


def _child_hta(trace: str, workdir: str) -> dict[str, Any]:
    t_imp = time.perf_counter()
    try:
        from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found]
    except ImportError as exc:
        raise _ChildUnavailable(
            f"HTA not importable in this interpreter ({exc}); pass --hta-python, e.g. a venv "
            "made with `python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install "
            "holistictraceanalysis psutil`"
        ) from exc
    imports_s = time.perf_counter() - t_imp
    trace_dir = os.path.join(workdir, "hta_trace_dir")
    os.makedirs(trace_dir)
    os.symlink(os.path.abspath(trace), os.path.join(trace_dir, os.path.basename(trace)))
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t1 = time.perf_counter()
    df = analyzer.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    n_steps: int | str
    try:
        n_steps = len(analyzer.get_profiler_steps())
    except Exception as exc:  # noqa: BLE001 - informational only
        n_steps = f"error: {exc}"
    return {
        "imports_s": imports_s,
        "load_s": t1 - t0,
        "analysis_s": t2 - t1,
        "work_s": t2 - t0,
        "result_summary": df.to_string()[:2000],
        "profiler_steps": n_steps,
        "versions": _versions(["HolisticTraceAnalysis", "pandas", "numpy"]),
    }


class _ChildUnavailable(RuntimeError):
    pass


def child_main(tool: str, trace: str, workdir: str, result_file: str) -> int:
    import resource

    fn = {"stepscope": _child_stepscope, "hta": _child_hta}[tool]
    try:
        res = fn(trace, workdir)
        res["ok"] = True
        rc = 0
    except _ChildUnavailable as exc:
        res = {"ok": False, "error": str(exc), "unavailable": True}
        rc = 3
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        import traceback

        res = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:],
        }
        rc = 1
    res["self_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res["children_maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(result_file, "w") as fh:
        json.dump(res, fh)
    return rc


# --------------------------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------------------------


def _tree_rss_bytes(root: int) -> int:
    """Sum of RSS over ``root`` and all its descendants (Linux /proc)."""
    total = 0
    stack = [root]
    seen: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * _PAGE
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    stack.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


class _Sampler(threading.Thread):
    def __init__(self, pid: int, period_s: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.period_s = period_s
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _tree_rss_bytes(self.pid))
            self.stop.wait(self.period_s)


def _uncompressed_bytes(path: str) -> int:
    if not path.endswith(".gz"):
        return os.path.getsize(path)
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n


def _warm_page_cache(path: str) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def run_once(
    tool: str,
    python: str,
    trace: str,
    workroot: str,
    timeout_s: float,
    sample_s: float,
    log_dir: str | None,
) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix=f"{tool}-", dir=workroot)
    result_file = os.path.join(workdir, "result.json")
    log_path = os.path.join(log_dir or workdir, f"{tool}-{os.path.basename(workdir)}.log")
    cmd = [
        python,
        os.path.abspath(__file__),
        "--child",
        tool,
        "--trace",
        trace,
        "--child-workdir",
        workdir,
        "--child-result",
        result_file,
    ]
    load_before = os.getloadavg()
    started = _dt.datetime.now().isoformat(timespec="seconds")
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        sampler = _Sampler(proc.pid, sample_s)
        sampler.start()
        timed_out = False
        deadline = t0 + timeout_s
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                timed_out = True
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop.set()
        sampler.join()
    rec: dict[str, Any] = {
        "tool": tool,
        "python": python,
        "started": started,
        "wall_s": wall,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "cpu_user_s": ru.ru_utime,
        "cpu_sys_s": ru.ru_stime,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "cores_used": (ru.ru_utime + ru.ru_stime) / wall if wall > 0 else None,
        "peak_rss_mb": ru.ru_maxrss * 1024 / 1e6,  # Linux: KiB
        "peak_tree_rss_mb": sampler.peak / 1e6,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "log": log_path if log_dir else None,
    }
    try:
        with open(result_file) as fh:
            rec.update(json.load(fh))
    except (OSError, ValueError):
        rec["ok"] = False
        with open(log_path, "rb") as fh:
            tail = fh.read()[-3000:].decode(errors="replace")
        rec["error"] = f"child wrote no result (rc={proc.returncode}); log tail:\n{tail}"
    if rec.get("ok") and proc.returncode != 0:
        rec["ok"] = False
    shutil.rmtree(workdir, ignore_errors=True)
    return rec


def summarize(runs: list[dict[str, Any]], mb: float) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    if not ok:
        errs = sorted({str(r.get("error", "?")).splitlines()[0] for r in runs})
        return {"runs": 0, "attempts": len(runs), "error": "; ".join(errs)}
    med = statistics.median
    walls = [r["wall_s"] for r in ok]
    cpu = med([r["cpu_s"] for r in ok])
    return {
        "runs": len(ok),
        "attempts": len(runs),
        "wall_s_median": med(walls),
        "wall_s_min": min(walls),
        "wall_s_max": max(walls),
        "work_s_median": med([r["work_s"] for r in ok]),
        "load_s_median": med([r["load_s"] for r in ok]),
        "analysis_s_median": med([r["analysis_s"] for r in ok]),
        "peak_rss_mb_median": med([r["peak_rss_mb"] for r in ok]),
        "peak_tree_rss_mb_median": med([r["peak_tree_rss_mb"] for r in ok]),
        "cpu_s_median": cpu,
        "cores_used_median": med([r["cores_used"] for r in ok]),
        "mb_per_s": mb / med(walls),
        "mb_per_s_per_core": mb / cpu if cpu else None,
        "loadavg_1m_during": [r["loadavg_after"][0] for r in ok],
        "versions": ok[0].get("versions"),
    }


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    if x is None:
        return "–"
    if fmt == "{:.1f}" and abs(x) < 10:
        fmt = "{:.2f}"
    return fmt.format(x)


def markdown_table(entry: dict[str, Any]) -> str:
    mb = entry["uncompressed_mb"]
    lines = [
        f"Trace: `{entry['trace']}` — {mb:.0f} MB uncompressed JSON"
        + (f", {entry['events']:,} events" if entry.get("events") else ""),
        "",
        (
            "| tool | runs | median wall s | min–max wall s | median work s (load + analysis) "
            "| median peak RSS MB | median peak tree RSS MB | cores used | MB/s | MB/s per core |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    summ = entry["summary"]
    for tool in TOOLS:
        s = summ.get(tool)
        if s is None:
            lines.append(f"| {tool} | pending | | | | | | | | |")
            continue
        label = f"{tool} (saved: --baseline)" if s.get("from_baseline") else tool
        if not s.get("runs"):
            lines.append(
                f"| {label} | 0/{s.get('attempts', 0)} | failed: {s.get('error', '')[:200]}"
                " | | | | | | | |"
            )
            continue
        lines.append(
            f"| {label} | {s['runs']} | {_f(s['wall_s_median'])} | "
            f"{_f(s['wall_s_min'])}–{_f(s['wall_s_max'])} | "
            f"{_f(s['load_s_median'])} + {_f(s['analysis_s_median'])} | "
            f"{_f(s['peak_rss_mb_median'], '{:.0f}')} | {_f(s['peak_tree_rss_mb_median'], '{:.0f}')} | "
            f"{_f(s['cores_used_median'], '{:.2f}')} | {_f(s['mb_per_s'])} | "
            f"{_f(s['mb_per_s_per_core'])} |"
        )
    a, b = summ.get("hta"), summ.get("stepscope")
    if a and b and a.get("runs") and b.get("runs"):
        speed = a["wall_s_median"] / b["wall_s_median"]
        mem = a["peak_rss_mb_median"] / b["peak_rss_mb_median"]
        tmem = a["peak_tree_rss_mb_median"] / b["peak_tree_rss_mb_median"]
        per_core = b["mb_per_s_per_core"]
        lines += [
            "",
            (
                f"HTA / stepscope: wall **{speed:.1f}x** (target >= 10x: "
                f"{'met' if speed >= 10 else 'NOT met'}), peak RSS **{mem:.1f}x** "
                f"(tree {tmem:.1f}x; target >= 3x: {'met' if mem >= 3 else 'NOT met'}); "
                f"stepscope {per_core:.0f} MB/s per core (target >= 100: "
                f"{'met' if per_core >= 100 else 'NOT met'})."
            ),
        ]
    return "\n".join(lines)


def _entry_key(e: dict[str, Any]) -> tuple[str, int]:
    return (os.path.basename(e["trace"]), e["uncompressed_bytes"])


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {"nproc": os.cpu_count(), "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as fh:
            info["mem_total_gb"] = round(int(fh.readline().split()[1]) / 1e6, 1)
    except OSError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--trace",
        action="append",
        required=True,
        help="Kineto trace (.json or .json.gz); may be repeated",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tools", default="stepscope,hta", help="comma list of: stepscope,hta")
    p.add_argument(
        "--stepscope-python",
        default=sys.executable,
        help="interpreter with stepscope installed (default: this one)",
    )
    p.add_argument(
        "--hta-python",
        default=sys.executable,
        help="interpreter with holistictraceanalysis installed (default: this one)",
    )
    p.add_argument(
        "--json",
        help="write raw results here (merged into an existing file: "
        "entries for the same trace are updated per tool)",
    )
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="results JSON of an earlier run (e.g. the HTA side): its numbers for a "
        "tool not run now on the same trace are shown and used for the ratios",
    )
    p.add_argument("--workdir", default=None, help="scratch folder (default: system temp)")
    p.add_argument("--logs", default=None, help="keep each child's stdout/stderr here")
    p.add_argument("--timeout", type=float, default=3600.0, help="per-run limit, seconds")
    p.add_argument("--sample-ms", type=float, default=100.0, help="tree-RSS sampling period")
    p.add_argument(
        "--no-warm-cache",
        action="store_true",
        help="don't read the trace once before measuring (page cache)",
    )
    # child mode (internal)
    p.add_argument("--child", choices=TOOLS, help=argparse.SUPPRESS)
    p.add_argument("--child-workdir", help=argparse.SUPPRESS)
    p.add_argument("--child-result", help=argparse.SUPPRESS)
    ns = p.parse_args(argv)

    if ns.child:
        return child_main(ns.child, ns.trace[0], ns.child_workdir, ns.child_result)

    tools = [t.strip() for t in ns.tools.split(",") if t.strip()]
    for t in tools:
        if t not in TOOLS:
            p.error(f"unknown tool {t!r}; choose from {', '.join(TOOLS)}")
    pythons = {"stepscope": ns.stepscope_python, "hta": ns.hta_python}
    if ns.logs:
        os.makedirs(ns.logs, exist_ok=True)
    workroot = tempfile.mkdtemp(prefix="import_vs_hta-", dir=ns.workdir)

    baseline: dict[tuple[str, int], dict[str, Any]] = {}
    for path in ns.baseline:
        with open(path) as fh:
            for e in json.load(fh).get("results", []):
                baseline.setdefault(_entry_key(e), {}).update(e["summary"])

    doc: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": _machine(),
        "results": [],
    }
    entries = []
    for trace in ns.trace:
        trace = os.path.abspath(trace)
        if not os.path.exists(trace):
            p.error(f"no such trace: {trace}")
        ub = _uncompressed_bytes(trace)
        entry: dict[str, Any] = {
            "trace": trace,
            "file_bytes": os.path.getsize(trace),
            "uncompressed_bytes": ub,
            "uncompressed_mb": ub / 1e6,
            "runs": {t: [] for t in tools},
            "summary": {},
        }
        print(f"# {trace}: {ub / 1e6:.0f} MB uncompressed", file=sys.stderr, flush=True)
        unavailable: set[str] = set()
        for rep in range(ns.repeats):
            for tool in tools:  # interleaved, so slow drifts in machine load hit both tools
                if tool in unavailable:
                    continue
                if not ns.no_warm_cache:
                    _warm_page_cache(trace)
                rec = run_once(
                    tool, pythons[tool], trace, workroot, ns.timeout, ns.sample_ms / 1000, ns.logs
                )
                entry["runs"][tool].append(rec)
                status = "ok" if rec.get("ok") else "FAILED: " + str(rec.get("error"))[:300]
                print(
                    f"  {tool} run {rep + 1}/{ns.repeats}: wall {rec['wall_s']:.1f} s, "
                    f"peak RSS {rec['peak_rss_mb']:.0f} MB, tree {rec['peak_tree_rss_mb']:.0f} MB,"
                    f" cpu {rec['cpu_s']:.1f} s, load {rec['loadavg_after'][0]:.2f} -> {status}",
                    file=sys.stderr,
                    flush=True,
                )
                if rec.get("unavailable"):
                    unavailable.add(tool)
        for tool in tools:
            entry["summary"][tool] = summarize(entry["runs"][tool], entry["uncompressed_mb"])
        for tool, s in baseline.get(_entry_key(entry), {}).items():
            if tool not in entry["summary"]:
                entry["summary"][tool] = dict(s, from_baseline=True)
        entries.append(entry)
        print(markdown_table(entry) + "\n", flush=True)
    doc["results"] = entries
    shutil.rmtree(workroot, ignore_errors=True)

    if ns.json:
        out = Path(ns.json)
        if out.exists():
            old = json.loads(out.read_text())
            merged = {_entry_key(e): e for e in old.get("results", [])}
            for e in entries:
                k = _entry_key(e)
                if k in merged:
                    merged[k]["runs"].update(e["runs"])
                    merged[k]["summary"].update(
                        {t: s for t, s in e["summary"].items() if not s.get("from_baseline")}
                    )
                else:
                    merged[k] = e
            old.setdefault("commands", [old.get("command")]).append(doc["command"])
            old["results"] = list(merged.values())
            old["date_last"] = doc["date"]
            doc = old
        out.write_text(json.dumps(doc, indent=1))
        print(f"raw results: {out}", file=sys.stderr)
    ok = all(s.get("runs") for e in entries for t, s in e["summary"].items() if t in tools)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
