"""End-to-end speed of ``stepscope import TRACE -o RUN`` then ``stepscope report RUN -o r.json``.

What a user runs, in two fresh processes (interpreter start and imports included). Per round
and code tree: wall and CPU (user + sys of the child, ``os.wait4``) and peak RSS of each
process; MB/s = MB of (uncompressed) trace / (import wall + report wall), MB = 10^6 bytes. The
trace is read once before each round (warm page cache). Code trees (``--variant
NAME=PYTHONPATH``, e.g. a worktree of the starting commit's ``src``) run interleaved round by
round, so that a machine whose speed drifts affects them alike; medians are printed. The JSON
reports of every tree are compared byte for byte (the run folder has the same path for all;
the manifest's ``created`` time, which differs per import, is blanked first).

The trace: ``--trace FILE``, or made from ``--fixture`` tiled ``--copies`` times with
``make_big_trace.py`` (into ``--workdir``, deleted afterwards unless ``--keep``)::

    python3 benchmarks/import_report_speed.py --python .venv/bin/python --repeats 5 \\
        --fixture /work/shared/fixtures/h100/gpt_bf16_adamw.pt.trace.json.gz --copies 30 \\
        --variant before=/tmp/wt-before/src --variant after=src

Each tree is byte-compiled first (``compileall``): with ``PYTHONDONTWRITEBYTECODE`` set no
``.pyc`` would be written and every run would pay for compiling the sources. Standard library
only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CREATED = re.compile(rb'"created": "[^"]*"')


def child(python: str, pythonpath: str, argv: list[str]) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "stepscope", *argv], stdout=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"stepscope {' '.join(argv)} failed (status {status})")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024}


def one_round(python: str, pythonpath: str, trace: Path, work: Path) -> tuple[dict[str, float],
                                                                              bytes]:
    run, out = work / "run", work / "report.json"
    shutil.rmtree(run, ignore_errors=True)
    out.unlink(missing_ok=True)
    with open(trace, "rb") as fh:  # warm the page cache
        while fh.read(1 << 24):
            pass
    r: dict[str, float] = {}
    for phase, argv in (("import", ["import", str(trace), "-o", str(run)]),
                        ("report", ["report", str(run), "--format", "json", "-o", str(out)])):
        for k, v in child(python, pythonpath, argv).items():
            r[f"{phase}_{k}"] = v
    r["wall_s"] = r["import_wall_s"] + r["report_wall_s"]
    r["cpu_s"] = r["import_cpu_s"] + r["report_cpu_s"]
    r["rss_mb"] = max(r["import_rss_mb"], r["report_rss_mb"])
    r["load1"] = os.getloadavg()[0]
    text = CREATED.sub(b'"created": ""', out.read_bytes())  # the import's time: not compared
    shutil.rmtree(run, ignore_errors=True)
    return r, text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="an existing (big) trace")
    ap.add_argument("--fixture", type=Path, help="tile this trace (make_big_trace.py)")
    ap.add_argument("--copies", type=int, default=30)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true", help="keep the tiled trace")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=PYTHONPATH (empty: the installed stepscope); repeatable")
    ap.add_argument("--python", default=sys.executable, help="interpreter with stepscope's deps")
    ap.add_argument("--json", type=Path, help="write every round's numbers here")
    args = ap.parse_args()
    if (args.trace is None) == (args.fixture is None):
        ap.error("give --trace or --fixture")
    variants = [v.split("=", 1) for v in args.variant or ["current="]]
    for _, path in variants:
        if path:
            subprocess.run([args.python, "-m", "compileall", "-q", path], check=True,
                           stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="ss_speed_", dir=args.workdir))
    try:
        trace = args.trace
        if trace is None:
            trace = work / f"{args.fixture.name.split('.')[0]}_x{args.copies}.pt.trace.json"
            subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), "--fixture",
                            str(args.fixture), "--copies", str(args.copies), "-o", str(trace)],
                           check=True, stdout=subprocess.DEVNULL)
        mb = trace.stat().st_size / 1e6  # the tiled trace is plain JSON
        runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
        texts: dict[str, set[bytes]] = {name: set() for name, _ in variants}
        for i in range(args.repeats):
            for name, path in variants:
                r, text = one_round(args.python, path, trace, work)
                runs[name].append(r)
                texts[name].add(text)
                print(f"  round {i + 1} {name}: import {r['import_wall_s']:.2f} s "
                      f"(CPU {r['import_cpu_s']:.2f}), report {r['report_wall_s']:.2f} s "
                      f"(CPU {r['report_cpu_s']:.2f}), {mb / r['wall_s']:.1f} MB/s, "
                      f"{r['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
        print(f"\n{trace.name}: {mb:.1f} MB, {args.repeats} rounds, medians")
        print("| code | **MB/s** (wall) | MB/s per CPU s | wall s | import wall s | report wall s "
              "| CPU s | import CPU s | report CPU s | peak RSS MB | 1-min load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, rs in runs.items():
            def med(key: str, rs: list[dict[str, float]] = rs) -> float:
                return statistics.median(r[key] for r in rs)
            print(f"| {name} | **{mb / med('wall_s'):.1f}** | {mb / med('cpu_s'):.1f} | "
                  f"{med('wall_s'):.2f} | {med('import_wall_s'):.2f} | "
                  f"{med('report_wall_s'):.2f} | {med('cpu_s'):.2f} | {med('import_cpu_s'):.2f} | "
                  f"{med('report_cpu_s'):.2f} | {med('rss_mb'):.0f} | "
                  f"{min(r['load1'] for r in rs):.1f}-{max(r['load1'] for r in rs):.1f} |")
        every = set().union(*texts.values())
        print("JSON reports: " + ("identical across rounds and code trees" if len(every) == 1
                                  else f"{len(every)} different texts: "
                                  + ", ".join(f"{n}: {len(t)}" for n, t in texts.items())))
        if args.json:
            args.json.write_text(json.dumps({"trace": str(trace), "mb": mb, "runs": runs},
                                            indent=1))
        if args.keep and args.trace is None:
            print(f"kept {trace}")
        return 0 if len(every) == 1 else 1
    finally:
        if not (args.keep and args.trace is None):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
