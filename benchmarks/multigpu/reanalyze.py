#!/usr/bin/env python3
"""Score a finished suite again with this checkout's analysis: for each scenario of
``summary.json`` whose runs came back (``bundle.tar.gz`` unpacked into BUNDLE: ``rec/NAME``,
``prof/NAME``, else ``traces/NAME`` imported again), the report is made again and the
scenario rescored; the measured timings stay the GPU's. Prints the table.

    python3 benchmarks/multigpu/reanalyze.py SUMMARY.json BUNDLE [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent / "scenarios")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import run_suite  # noqa: E402
import score  # noqa: E402

from stepscope.importers import import_traces  # noqa: E402
from stepscope.reporters.json_report import report_dict  # noqa: E402
from stepscope.reporters.report import build_report  # noqa: E402
from stepscope.store.run import Run  # noqa: E402


def _findings(run_dir: Path) -> list[dict[str, Any]]:
    return run_suite.findings_of(report_dict(build_report(Run(run_dir))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", type=Path)
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    doc = json.loads(a.summary.read_text())
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in doc["scenarios"]:
            name = s["scenario"]
            for path, folder in (("record", "rec"), ("profiler", "prof")):
                p = s.get(path) or {}
                if p.get("status") != "ok":
                    continue
                run_dir = a.bundle / folder / name
                if not (run_dir / "manifest.json").exists() and path == "profiler":
                    traces = sorted((a.bundle / "traces" / name).glob("*.json.gz"))
                    if traces:
                        run_dir = Path(import_traces(traces, Path(tmp) / name))
                if (run_dir / "manifest.json").exists():
                    p["findings"] = _findings(run_dir)
                    p["reanalyzed"] = True
            out.append(score.rescore(s))
    doc["scenarios"] = out
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))
    print(score.table(out, doc.get("meta")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
