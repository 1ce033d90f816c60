"""What a faster gzip (``isal`` or ``zlib-ng``, ``pip install 'stepscope[fast]'``) gives
``stepscope import`` of a ``.json.gz`` trace.

Two measurements, each module in turn (those not installed are skipped):

1. the decompression alone: ``importers.kineto.trace_file.gunzip`` of the file's bytes,
   in this process (the bytes read once first), CPU seconds per run;
2. the whole import: a fresh ``python -m stepscope import TRACE -o RUN --force`` per run,
   wall clock and CPU (user + sys of the child, ``os.wait4``), with the faster modules hidden
   from the child by a folder of stand-ins on ``PYTHONPATH`` whose import fails (so "zlib" is
   the standard library's, "zlib-ng" is zlib-ng with isal hidden, "isal" is isal).

Runs are interleaved; medians and quartiles are printed as a Markdown table.

    PYTHONPATH=src python benchmarks/gzip_import.py --trace /tmp/x30.pt.trace.json.gz --repeats 5
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stepscope.importers.kineto.trace_file import gunzip

MODULES = {"zlib": "zlib", "zlib-ng": "zlib_ng.zlib_ng", "isal": "isal.isal_zlib"}
HIDE = {"zlib": ("isal", "zlib_ng"), "zlib-ng": ("isal",), "isal": ()}


def installed() -> list[str]:
    out = []
    for name, module in MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        out.append(name)
    return out


def hiding(folder: Path, packages: tuple[str, ...]) -> str:
    """A folder whose packages of these names fail to import; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    for pkg in packages:
        (folder / pkg).mkdir(exist_ok=True)
        (folder / pkg / "__init__.py").write_text(
            f"raise ImportError('{pkg} hidden by benchmarks/gzip_import.py')\n")
    return str(folder)


def import_once(trace: Path, out: Path, pythonpath: str) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "import", str(trace), "-o",
                             str(out), "--force", "--quiet"], env=env,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"import of {trace} failed")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def _cell(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{q[1]:.2f} ({q[0]:.2f}-{q[2]:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True, help="a .json.gz Kineto trace")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-import", action="store_true", help="the decompression only")
    a = ap.parse_args()
    names = installed()
    raw = a.trace.read_bytes()
    size = 0
    alone: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(a.repeats):
        for n in names:
            mod = importlib.import_module(MODULES[n])
            t0 = time.process_time()
            size = len(gunzip(raw, mod))
            alone[n].append(time.process_time() - t0)
    del raw
    print(f"{a.trace.name}: {a.trace.stat().st_size / 1e6:.1f} MB gzip, {size / 1e6:.1f} MB of "
          f"JSON; {a.repeats} runs each; seconds: median (quartiles)\n")
    print("| gzip module | decompress CPU s | MB/s | import wall s | import CPU s |")
    print("|---|---|---|---|---|")
    whole: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    src = str(Path(__file__).resolve().parent.parent / "src")
    with tempfile.TemporaryDirectory(prefix="stepscope-gzip-") as tmp:
        paths = {n: hiding(Path(tmp) / f"hide-{n}", HIDE[n]) + os.pathsep + src for n in names}
        for _ in range(0 if a.skip_import else a.repeats):
            for n in names:
                whole[n].append(import_once(a.trace, Path(tmp) / "run", paths[n]))
    for n in names:
        med = statistics.median(alone[n])
        walls, cpus = [w for w, _ in whole[n]], [c for _, c in whole[n]]
        print(f"| {n} | {_cell(alone[n])} | {size / 1e6 / med:.0f} | "
              f"{_cell(walls) if walls else '-'} | {_cell(cpus) if cpus else '-'} |")


if __name__ == "__main__":
    main()
