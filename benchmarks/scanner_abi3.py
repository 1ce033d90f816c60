"""The Kineto scanner built against the stable ABI (``abi3``, what the wheel ships) against the
same source built against the full C API (``-DSS_FULL_API``; optionally also the sources of a git
revision, ``--rev``, e.g. the last full-API commit). Each variant is compiled here with the
compiler and flags setuptools takes from ``sysconfig`` (CC, CFLAGS, CCSHARED, LDSHARED), then
loaded in fresh processes, interleaved (ABBA...), each reading the whole trace with
``parse_kineto``. Measured in the child: CPU time inside the scanner's ``scan`` calls (thread
time) and CPU time of the whole parse (user + sys). Prints the medians, the ratios to the
full-API build, and whether every variant gave the same tables.

    python benchmarks/make_big_trace.py --fixture tests/data/gpt_bf16_adamw.pt.trace.json.gz \\
        --copies 30 -o /tmp/bench/gpt_x30.pt.trace.json
    python benchmarks/scanner_abi3.py /tmp/bench/gpt_x30.pt.trace.json --repeats 9
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("_kineto_scan.c", "_kineto_json.h", "_kineto_event.h")
HERE = "src/stepscope/importers"


def build(src: Path, out: Path, defines: list[str]) -> Path:
    """``src/_kineto_scan.c`` compiled and linked as setuptools does, into ``out``."""
    var = sysconfig.get_config_var
    obj = out.with_suffix(".o")
    cc = shlex.split(var("CC")) + shlex.split(var("CFLAGS")) + shlex.split(var("CCSHARED"))
    subprocess.run([*cc, *defines, f"-I{var('INCLUDEPY')}", "-c", str(src / SOURCES[0]),
                    "-o", str(obj)], check=True)
    subprocess.run([*shlex.split(var("LDSHARED")), str(obj), "-o", str(out)], check=True)
    return out


def child(so: str, trace: str) -> None:
    """Read ``trace`` with the scanner at ``so``; print one JSON line."""
    spec = importlib.util.spec_from_file_location("stepscope.importers._ss_kineto", so)
    assert spec is not None and spec.loader is not None
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    from stepscope.importers.kineto import native
    from stepscope.importers.kineto.parse import parse_kineto

    spent = [0.0, 0]

    class Timed:
        def scan(self, *args: object) -> object:
            t0 = time.thread_time()
            got = ext.scan(*args)
            spent[0] += time.thread_time() - t0
            spent[1] += got is not None
            return got

    native.EXTENSION = Timed()  # type: ignore[assignment]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    bundle = parse_kineto(trace, default_rank=0, native=True)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    digest = hashlib.sha256()
    for name in sorted(bundle.tables):
        digest.update(name.encode())
        for col in bundle.tables[name].columns:
            for buf in col.combine_chunks().buffers():
                if buf is not None:
                    digest.update(buf)
    print(json.dumps({"scan": spent[0], "chunks": spent[1], "parse": cpu,
                      "tables": digest.hexdigest()[:16]}))


def one(so: Path, trace: Path) -> dict[str, float | str]:
    with open(trace, "rb") as fh:  # warm page cache
        while fh.read(1 << 24):
            pass
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = subprocess.run([sys.executable, __file__, str(trace), "--child", str(so)], env=env,
                         capture_output=True, text=True, check=True).stdout
    got: dict[str, float | str] = json.loads(out.strip().splitlines()[-1])
    if not got["chunks"]:
        raise SystemExit(f"{trace}: the scanner read no chunk (a small trace is decoded whole)")
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rev", help="also build the scanner sources of this git revision "
                                  "(as they were: full C API before the abi3 change)")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # the scanner to time, in a child
    args = ap.parse_args()
    if args.child:
        child(args.child, str(args.trace))
        return
    with tempfile.TemporaryDirectory(prefix="scanner_abi3-") as d:
        tmp = Path(d)
        variants = {"full": build(ROOT / HERE, tmp / "full.so", ["-DSS_FULL_API"]),
                    "abi3": build(ROOT / HERE, tmp / "abi3.so", [])}
        if args.rev:
            old = tmp / "rev"
            old.mkdir()
            for name in SOURCES:
                (old / name).write_bytes(subprocess.run(
                    ["git", "-C", str(ROOT), "show", f"{args.rev}:{HERE}/{name}"],
                    capture_output=True, check=True).stdout)
            variants[args.rev] = build(old, tmp / "rev.so", [])
        order = list(variants)
        got: dict[str, list[dict[str, float | str]]] = {k: [] for k in order}
        for i in range(args.repeats):
            for name in order if i % 2 == 0 else order[::-1]:
                got[name].append(one(variants[name], args.trace))
    med = {k: {m: statistics.median(float(r[m]) for r in v) for m in ("scan", "parse")}
           for k, v in got.items()}
    tables = {str(r["tables"]) for v in got.values() for r in v}
    for k in order:
        each = ", ".join(f"{float(r['scan']):.3f}" for r in got[k])
        print(f"{k}: scan CPU median {med[k]['scan']:.3f} s, parse CPU median "
              f"{med[k]['parse']:.3f} s ({got[k][0]['chunks']} chunks; scan CPU of each run: "
              f"{each})")
    for k in order[1:]:
        print(f"{k} / full: scan {med[k]['scan'] / med['full']['scan']:.3f}x, parse "
              f"{med[k]['parse'] / med['full']['parse']:.3f}x")
    print(f"same tables from every build: {'yes' if len(tables) == 1 else 'NO'}; "
          f"{args.repeats} rounds; 1-min load {os.getloadavg()[0]:.1f}; "
          f"{sysconfig.get_config_var('CC')} {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
