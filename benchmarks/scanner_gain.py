"""What the compiled Kineto scanner saves: ``stepscope import TRACE`` with it and without it
(``STEPSCOPE_KINETO_NATIVE=1`` / ``=0``), fresh processes, interleaved (ABBA), one rank read in
the process (``--workers 1``). CPU = user + sys of the child (``os.wait4``); the trace is read
once before each run (warm page cache). Prints medians and the ratio without / with: the figure
behind the one-line notice given when the scanner is not installed (``importers.kineto.native``).

    python benchmarks/make_big_trace.py --fixture tests/data/gpt_bf16_adamw.pt.trace.json.gz \\
        --copies 30 -o /tmp/bench/gpt_x30.pt.trace.json
    python benchmarks/scanner_gain.py /tmp/bench/gpt_x30.pt.trace.json --repeats 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(trace: Path, native: str, out: Path) -> tuple[float, float]:
    shutil.rmtree(out, ignore_errors=True)
    with open(trace, "rb") as fh:
        while fh.read(1 << 24):
            pass
    env = dict(os.environ, STEPSCOPE_KINETO_NATIVE=native)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "stepscope", "import", str(trace), "-o", str(out),
                          "--workers", "1", "--quiet"], env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(f"stepscope import failed (STEPSCOPE_KINETO_NATIVE={native})")
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    got: dict[str, list[tuple[float, float]]] = {"scanner": [], "msgspec": []}
    with tempfile.TemporaryDirectory(prefix="scanner_gain-") as d:
        for i in range(args.repeats):
            pair = [("scanner", "1"), ("msgspec", "0")]
            for name, native in pair if i % 2 == 0 else pair[::-1]:
                got[name].append(one(args.trace, native, Path(d) / name))
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
           for k, v in got.items()}
    for k, (cpu, wall) in med.items():
        print(f"{k}: median CPU {cpu:.2f} s, wall {wall:.2f} s "
              f"(CPU of each run: {', '.join(f'{c:.2f}' for c, _ in got[k])})")
    print(f"without / with the scanner: CPU {med['msgspec'][0] / med['scanner'][0]:.2f}x, "
          f"wall {med['msgspec'][1] / med['scanner'][1]:.2f}x; 1-min load "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
