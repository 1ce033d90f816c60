"""A large Nsight Systems export and ``stepscope import`` of it: wall time and peak RSS.

Builds the export by repeating the activity rows (kernels, runtime calls, NVTX, memcpy) of a
real one N times, each copy shifted by the export's span in time and by 10**7 in correlation
ids (lookup tables kept once), then runs ``python -m stepscope import`` on it in a fresh
process (``/usr/bin/time``-free: ``os.wait4``'s ru_maxrss). Standard library only.

    python3 benchmarks/nsys_import.py \\
        --fixture ../shared/fixtures/nsys/nsysai_fastvideo_train_2xh100_before_slice300ms.sqlite.gz \\
        --copies 100
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
          "CUPTI_ACTIVITY_KIND_MEMCPY")


def build(fixture: Path, out: Path, copies: int) -> None:
    with (gzip.open(fixture) if fixture.name.endswith(".gz") else open(fixture, "rb")) as src, \
            open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    con = sqlite3.connect(out)
    lo, hi = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    span = hi - lo + 1
    for t in TABLES:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        if not cols:
            continue
        con.execute(f'CREATE TEMP TABLE base AS SELECT * FROM "{t}"')
        sel = ", ".join(f'"{c}" + :off' if c in ("start", "end") else
                        ('"correlationId" + :coff' if c == "correlationId" else f'"{c}"')
                        for c in cols)
        for i in range(1, copies):
            con.execute(f'INSERT INTO "{t}" ({", ".join(cols)}) SELECT {sel} FROM base',
                        {"off": i * span, "coff": i * 10_000_000})
        con.execute("DROP TABLE base")
    con.commit()
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", type=Path, required=True)
    ap.add_argument("--copies", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.sqlite"
        build(args.fixture, db, args.copies)
        rows = sqlite3.connect(db).execute(
            "SELECT (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL), "
            "(SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME)").fetchone()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "stepscope", "import", str(db), "-o",
                                 str(Path(tmp) / "run"), "--quiet"], stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        print(f"export {db.stat().st_size / 1e6:.0f} MB, {rows[0]} kernels, {rows[1]} runtime "
              f"calls: import {wall:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU, "
              f"peak RSS {usage.ru_maxrss / 1024:.0f} MB, exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
