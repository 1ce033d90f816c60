#!/usr/bin/env python3
"""Rank-parallel import (issue 20, item 6): `stepscope import` of many ranks, 1 vs N workers
(local process pool) and the Dask engine (a local cluster), then `stepscope report` on the run.

The rank set is made at run time in a temporary folder (never committed): copies of real
Kineto traces (``--fixtures``: HTA's two sampled ranks ``trace_filter_sampled_rank-{0,1}`` and
its NCCL trace ``nccl_parser_config_nccl_data``; ranks cycle through the three), each copy with
its ``distributedInfo`` rank and world size rewritten. Each measurement is a fresh
``python -m stepscope`` process:

* wall s     -- spawn to exit, as the parent sees it (start-up and imports included);
* parent MB  -- the command's own peak resident set (``ru_maxrss`` of ``os.wait4``; with
                workers this is the process that assembles the run);
* tree MB    -- peak of the SUM of memory over the command and all its descendants (workers,
                the fork server, a Dask cluster's nanny and worker processes), sampled every
                20 ms: proportional set sizes with psutil (a page shared by several processes,
                as the workers share the fork server's imports, counted once), else RSS from
                /proc (an upper bound);
* CPU s      -- user + sys of the command and all its descendants (each one's own, sampled with
                psutil; without psutil, the command's and the children it waited for).

The report phase (``--report-workers``, default ``1,N``): ``stepscope report RUN -o
report.json --workers W`` of the imported run, serial against the pool (and the Dask engine
with ``--engines ...,dask``), each JSON report compared byte for byte with the serial one.

Medians of ``--repeats`` (default 3), runs interleaved. Every run's tables are compared with
the first (serial) run's, byte for byte (exit 1 when they differ). Example (the driver needs
only the standard library; the measured command runs with ``--python``)::

    .venv/bin/python benchmarks/rank_parallel.py --ranks 64 --workers 1,2 --engines process,dask
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz",
             "nccl_parser_config_nccl_data.json.gz")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MARK = 987654321  # a rank no template holds: replaced per copy


def make_ranks(fixtures: Path, folder: Path, n: int) -> int:
    """``n`` rank files in ``folder``; returns their uncompressed bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = []
    for name in TEMPLATES:
        doc = json.loads(gzip.decompress((fixtures / name).read_bytes()))
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": _MARK,
                                  "world_size": n}
        texts.append(json.dumps(doc).encode())
    total = 0
    for r in range(n):
        raw = texts[r % len(texts)].replace(f'"rank": {_MARK}'.encode(), f'"rank": {r}'.encode())
        total += len(raw)
        (folder / f"rank-{r}.pt.trace.json.gz").write_bytes(gzip.compress(raw, compresslevel=1))
    return total


def _tree(pid: int, cpu: dict[int, float]) -> int:
    """The summed RSS of ``pid`` and its descendants now; with psutil, each one's own CPU time
    so far goes into ``cpu`` (pid -> seconds)."""
    try:
        import psutil
    except ImportError:
        return _proc_tree_rss(pid)
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            with q.oneshot():
                # PSS: the pages a worker shares with the fork server (copy-on-write after the
                # fork) counted once over the tree, not once per process as RSS would
                m = q.memory_full_info()
                total += getattr(m, "pss", m.rss)
                t = q.cpu_times()
                cpu[q.pid] = max(cpu.get(q.pid, 0.0), t.user + t.system)
        except psutil.Error:
            pass
    return total


def _proc_tree_rss(pid: int) -> int:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        q = todo.pop()
        try:
            total += int((Path("/proc") / str(q) / "statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass
        todo += kids.get(q, [])
    return total


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``cmd``; wall, CPU, the command's peak RSS and the peak of its tree's RSS."""
    errors = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    peak = [0]
    cpu: dict[int, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree(proc.pid, cpu))
            stop.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    with errors:
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()}")
    own = usage.ru_utime + usage.ru_stime  # the command and the children it waited for
    # the workers are the fork server's children, not the command's: their CPU as sampled
    others = sum(t for pid, t in cpu.items() if pid != proc.pid)
    return {"wall_s": wall, "cpu_s": max(own, cpu.get(proc.pid, 0.0) + others),
            "parent_mb": usage.ru_maxrss * 1024 / 1e6, "tree_mb": peak[0] / 1e6}


def tables(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*.parquet"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--workers", default=f"1,{os.cpu_count() or 1}",
                    help="comma-separated worker counts for the process pool (1: serial)")
    ap.add_argument("--engines", default="process,dask",
                    help="process and/or dask (dask: a local cluster of the largest --workers)")
    ap.add_argument("--report-workers", default=None,
                    help="comma-separated worker counts for `stepscope report` of the run "
                         "(default: those of --workers)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "data",
                    help="folder holding the template traces (tests/data: copies of "
                         "../shared/fixtures/hta)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with stepscope")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    configs: list[tuple[str, list[str]]] = [
        (f"process, {w} worker{'s' if w > 1 else ''}", ["--workers", str(w)]) for w in counts]
    if "dask" in args.engines.split(","):
        configs.append((f"dask local cluster, {max(counts)} workers",
                        ["--engine", "dask", "--workers", str(max(counts))]))
    if "process" not in args.engines.split(","):
        configs = [c for c in configs if c[0].startswith("dask")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    rcounts = [int(w) for w in (args.report_workers or args.workers).split(",")]
    rconfigs: list[tuple[str, list[str]]] = [
        (f"report, {w} worker{'s' if w > 1 else ''}", ["--workers", str(w)]) for w in rcounts]
    if "dask" in args.engines.split(","):
        rconfigs.append((f"report, dask local cluster, {max(rcounts)} workers",
                         ["--engine", "dask", "--workers", str(max(rcounts))]))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in configs}
    reports: dict[str, list[dict[str, float]]] = {name: [] for name, _ in rconfigs}
    report_json: bytes | None = None
    with tempfile.TemporaryDirectory(prefix="stepscope-ranks-") as tmp:
        traces = Path(tmp) / "traces"
        size = make_ranks(args.fixtures, traces, args.ranks)
        first: dict[str, bytes] | None = None
        for rep in range(args.repeats):
            for name, extra in configs:
                out = Path(tmp) / f"run-{rep}-{len(results[name])}-{extra[-1]}-{extra[1]}"
                r = measure([args.python, "-m", "stepscope", "import", str(traces), "-o",
                             str(out), "--quiet", *extra], env)
                results[name].append(r)
                got = tables(out)
                if name == configs[0][0]:  # the reports of the run, once per round
                    report_json = None  # the JSON names the run's folder: one per round
                    for rname, rextra in rconfigs:
                        dest = Path(tmp) / f"report-{rep}-{len(reports[rname])}.json"
                        reports[rname].append(measure(
                            [args.python, "-m", "stepscope", "report", str(out), "-o",
                             str(dest), "--quiet", *rextra], env))
                        text = dest.read_bytes()
                        dest.unlink()
                        if report_json is None:
                            report_json = text
                        elif text != report_json:
                            print(f"{rname}: the JSON report differs from the first one",
                                  file=sys.stderr)
                            return 1
                        print(f"  {rname} #{rep + 1}: {reports[rname][-1]['wall_s']:.2f} s",
                              file=sys.stderr)
                if first is None:
                    first = got
                elif got != first:
                    print(f"{name}: the run's tables differ from the first run's",
                          file=sys.stderr)
                    return 1
                print(f"  {name} #{rep + 1}: {r['wall_s']:.2f} s", file=sys.stderr)
                for p in sorted(out.rglob("*"), reverse=True):
                    p.unlink() if p.is_file() else p.rmdir()
                out.rmdir()
    med = {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
           for name, rs in results.items()}
    base = med[configs[0][0]]["wall_s"]
    print(f"{args.ranks} ranks, {size / 1e6:.0f} MB of trace JSON (uncompressed), "
          f"medians of {args.repeats}; {platform.node()}: {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print()
    print("| engine | wall s | speed-up | CPU s | parent peak MB | tree peak MB |")
    print("|---|---|---|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['wall_s']:.2f} | x{base / m['wall_s']:.2f} | {m['cpu_s']:.2f} | "
              f"{m['parent_mb']:.0f} | {m['tree_mb']:.0f} |")
    rmed = {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
            for name, rs in reports.items()}
    rbase = rmed[rconfigs[0][0]]["wall_s"]
    print()
    print(f"`stepscope report` of the {args.ranks}-rank run (JSON; the same bytes every time):")
    print()
    print("| report | wall s | speed-up | CPU s | parent peak MB | tree peak MB |")
    print("|---|---|---|---|---|---|")
    for name, m in rmed.items():
        print(f"| {name} | {m['wall_s']:.2f} | x{rbase / m['wall_s']:.2f} | {m['cpu_s']:.2f} | "
              f"{m['parent_mb']:.0f} | {m['tree_mb']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"ranks": args.ranks, "bytes": size, "runs": results,
                                         "reports": reports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
