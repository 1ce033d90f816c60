"""Check that the compiled Kineto scanner and the msgspec decode write the same run.

Imports TRACE twice in fresh processes (``STEPSCOPE_KINETO_NATIVE=1`` and ``=0``), reads every
Parquet table back and compares them with ``pyarrow.Table.equals``, and compares the manifests
apart from their creation time. Exit status 1 on any difference.

    .venv/bin/python benchmarks/compare_import_paths.py --trace /tmp/bench/x120/gpt_x120.pt.trace.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _import(python: str, trace: Path, out: Path, native: str) -> None:
    env = dict(os.environ, STEPSCOPE_KINETO_NATIVE=native)
    subprocess.run([python, "-m", "stepscope", "import", str(trace), "-o", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--python", default=sys.executable, help="interpreter with stepscope")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        runs = {flag: Path(tmp) / f"run{flag}" for flag in ("1", "0")}
        for flag, out in runs.items():
            _import(args.python, args.trace, out, flag)
        fast, slow = runs["1"], runs["0"]
        names = sorted(p.relative_to(fast) for p in fast.glob("*/*.parquet"))
        other = sorted(p.relative_to(slow) for p in slow.glob("*/*.parquet"))
        bad = [] if names == other else [f"tables differ: {names} vs {other}"]
        for name in names:
            a, b = pq.read_table(fast / name), pq.read_table(slow / name)
            if not a.equals(b):
                bad.append(f"{name}: not equal")
            print(f"{name}: {a.num_rows} rows, {'equal' if a.equals(b) else 'DIFFERENT'}")
        ma, mb = (json.loads((r / "manifest.json").read_text()) for r in (fast, slow))
        ma.pop("created", None)
        mb.pop("created", None)
        print(f"manifest (without 'created'): {'equal' if ma == mb else 'DIFFERENT'}")
        if ma != mb:
            bad.append("manifest differs")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
