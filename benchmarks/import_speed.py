"""End-to-end speed of ``stepscope import TRACE -o RUN``, in MB of uncompressed JSON per CPU second.

Each run is a fresh ``python -m stepscope import`` process (interpreter start and imports
included); CPU = user + sys of the child (``os.wait4``); MB = 10^6 bytes of the (uncompressed)
trace. The trace is read once before each run (warm page cache). Variants (``NAME=PYTHONPATH``,
e.g. an older checkout's ``src``) run interleaved, so a machine whose speed drifts affects them
alike; compare medians. Standard library only.

    python3 benchmarks/import_speed.py --trace /tmp/bench/x30/gpt_x30.pt.trace.json --repeats 10 \\
        --variant before=/tmp/base_wt/src --variant after=
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def uncompressed_size(path: Path) -> int:
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while piece := fh.read(1 << 24):
            n += len(piece)
    return n


def one_run(python: str, pythonpath: str, trace: Path, out: Path) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    shutil.rmtree(out, ignore_errors=True)
    with open(trace, "rb") as fh:  # warm the page cache
        while fh.read(1 << 24):
            pass
    t0 = time.perf_counter()
    child = subprocess.Popen([python, "-m", "stepscope", "import", str(trace), "-o", str(out)],
                             stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"stepscope import failed (status {status}) on {trace}")
    shutil.rmtree(out, ignore_errors=True)
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall,
            "rss_mb": usage.ru_maxrss / 1024, "load1": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", required=True, type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=PYTHONPATH (empty: the installed stepscope); repeatable")
    ap.add_argument("--python", default=sys.executable, help="interpreter with stepscope's deps")
    ap.add_argument("--json", type=Path, help="write every run's numbers here")
    args = ap.parse_args()
    variants = [v.split("=", 1) for v in args.variant or ["current="]]
    raw: dict[str, dict[str, list[dict[str, float]]]] = {}
    print("| trace | variant | runs | median CPU s | median MB/s per core | min-max MB/s per core "
          "| median wall s | median peak RSS MB | 1-min load |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.trace:
            mb = uncompressed_size(trace) / 1e6
            runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
            for _ in range(args.repeats):
                for name, path in variants:
                    r = one_run(args.python, path, trace, Path(tmp) / "run")
                    runs[name].append(r)
                    print(f"  {trace.name} {name}: {r['cpu_s']:.2f} s CPU, "
                          f"{mb / r['cpu_s']:.1f} MB/s per core", file=sys.stderr, flush=True)
            for name, rs in runs.items():
                cpu = [r["cpu_s"] for r in rs]
                print(f"| {trace.name} ({mb:.0f} MB) | {name} | {len(rs)} | "
                      f"{statistics.median(cpu):.2f} | {mb / statistics.median(cpu):.1f} | "
                      f"{mb / max(cpu):.1f}-{mb / min(cpu):.1f} | "
                      f"{statistics.median(r['wall_s'] for r in rs):.2f} | "
                      f"{statistics.median(r['rss_mb'] for r in rs):.0f} | "
                      f"{min(r['load1'] for r in rs):.1f}-{max(r['load1'] for r in rs):.1f} |",
                      flush=True)
            raw[str(trace)] = runs
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
