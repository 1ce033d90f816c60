#!/usr/bin/env python3
"""Re-run the advisor on a finished suite's traces, keeping its measurements.

The GPU run (run.py) measures baseline and fixed step times and captures each
baseline's trace; the advisor's answer is a pure function of the trace. After an
advisor change (or a new speed-up table entry) this script scores the same traces
again without a GPU, and says so in the output:

    PYTHONPATH=src python3 benchmarks/scenarios/rescore.py --results OUT/results.json \
        --traces OUT/traces.tar.gz --out NEWOUT

It needs the suite's own imports (torch is imported by common.py; the CPU build is enough).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent.parent / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="results.json of a GPU run")
    ap.add_argument("--traces", required=True, help="traces.tar.gz of the same run")
    ap.add_argument("--out", required=True, help="folder for the new results.json/accuracy.md")
    args = ap.parse_args()

    import common
    from run import accuracy_md

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = json.loads(Path(args.results).read_text())
    with tarfile.open(args.traces) as tar:
        tar.extractall(out, filter="data")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    meta = dict(data["meta"])
    meta["rescored"] = (f"advisor re-run without a GPU on {time.strftime('%Y-%m-%d')} "
                        f"(commit {commit or 'unknown'}) on the traces of the GPU run of "
                        f"{meta.get('date', '?')}; measurements unchanged")
    results = []
    for res in data["scenarios"]:
        res = dict(res)
        trace = out / "traces" / f"{res['scenario']}.pt.trace.json.gz"
        if res.get("timing") and trace.exists():
            res["advice"] = common.advise_trace(trace, out / "runs" / res["scenario"])
            res["score"] = common.score(res.get("expected", ""), res["timing"], res["advice"])
        results.append(res)
    (out / "results.json").write_text(json.dumps({"meta": meta, "scenarios": results},
                                                 indent=1, default=str))
    text = accuracy_md(results, meta)
    (out / "accuracy.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
