"""Cut an Nsight Systems SQLite export down to a small test file (how tests/data/nsys/ was made).

    python tests/data/nsys/cut_export.py SRC.sqlite DST.sqlite [--window-ms MS] [--drop T,...]

Keeps the activity rows (kernels, memcpy, memset, sync, runtime/driver calls, NVTX, OS runtime)
whose [start, end] lies within the first MS milliseconds of the first GPU activity (all of
them without --window-ms), the lookup tables whole except ``StringIds`` (cut to the ids
referenced) and ``PROCESSES`` / ``ThreadNames`` (cut to the processes left), and drops bulky
tables the importer does not read (sampling, callchains, scheduling, composite events, the
capture's environment dump). Then VACUUMs.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3

TIMED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
         "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME",
         "CUPTI_ACTIVITY_KIND_DRIVER", "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_OVERHEAD",
         "PROFILER_OVERHEAD", "DIAGNOSTIC_EVENT")
DROP = ("SAMPLING_CALLCHAINS", "OSRT_CALLCHAINS", "CUDA_CALLCHAINS", "COMPOSITE_EVENTS",
        "SCHED_EVENTS", "META_DATA_CAPTURE", "TARGET_INFO_SYSTEM_ENV", "NVTX_PAYLOAD_SCHEMAS",
        "NVTX_PAYLOAD_SCHEMA_ENTRIES", "ProcessStreams", "ANALYSIS_FILE", "UnwindMethodType")
STRING_REFS = {"CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName", "shortName", "mangledName"),
               "CUPTI_ACTIVITY_KIND_RUNTIME": ("nameId",), "CUPTI_ACTIVITY_KIND_DRIVER": ("nameId",),
               "NVTX_EVENTS": ("textId",), "OSRT_API": ("nameId",), "ThreadNames": ("nameId",)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--window-ms", type=float)
    args = ap.parse_args()
    shutil.copyfile(args.src, args.dst)
    con = sqlite3.connect(args.dst)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t in DROP:
        if t in tables:
            con.execute(f'DROP TABLE "{t}"')
    if args.window_ms is not None:
        lo = con.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        hi = lo + int(args.window_ms * 1e6)
        for t in TIMED:
            cols = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
            if {"start", "end"} <= cols:  # NVTX events without an end (names) are kept
                keep_open = " OR end IS NULL" if t == "NVTX_EVENTS" else ""
                con.execute(f'DELETE FROM "{t}" WHERE NOT ((start >= ? AND end <= ?){keep_open})',
                            (lo, hi))
    gpu = ",".join(str(r[0] >> 24) for r in con.execute(
        "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    con.execute(f"DELETE FROM PROCESSES WHERE (globalPid >> 24) NOT IN ({gpu})")
    con.execute(f"DELETE FROM ThreadNames WHERE (globalTid >> 24) NOT IN ({gpu})")
    refs: set[int] = set()
    for t, cols in STRING_REFS.items():
        if t not in tables:
            continue
        have = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
        for c in cols:
            if c in have:
                refs.update(r[0] for r in con.execute(f'SELECT DISTINCT "{c}" FROM "{t}"')
                            if r[0] is not None)
    con.execute("CREATE TEMP TABLE keep(id INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO keep VALUES (?)", [(i,) for i in refs])
    con.execute("DELETE FROM StringIds WHERE id NOT IN (SELECT id FROM keep)")
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    main()
