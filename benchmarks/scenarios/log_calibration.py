#!/usr/bin/env python3
"""The user's path to a calibrated prediction, end to end on a GPU: the program's own log gives
its untraced step, ``stepscope record`` records it, ``stepscope report --untraced-step-ms``
predicts each fix from that step, and the fixed program's own log says what the fix gave.

    python3 benchmarks/scenarios/log_calibration.py --out DIR [--steps N] NAME [NAME ...]

DIR must be new or empty: everything is written there, nothing outside it.

Per scenario (``program.py``: the step in a plain loop, no stepscope import): the baseline and
the default fix variant each run ``--steps`` steps untraced (their closing line's ms/step is the
"log"); ``stepscope record -o DIR/runs/NAME --quiet -- python program.py NAME``; then
``stepscope report DIR/runs/NAME --untraced-step-ms MS --format json`` with the baseline's
ms/step. The prediction read is the variant's (``variants.py``: its remedy ids): the one remedy,
else the plan restricted to its ids, else the plan, as ``remedy_score.predict`` reads it. Writes
DIR/NAME.report.json, DIR/NAME.log and DIR/log_calibration.json, and prints a Markdown table.
The ms/step of a log includes the loop's first steps (warm-up, cuDNN's choice): ``--steps``
long enough makes them small.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import variants  # after the sys.path setup
from remedy_score import predict, remedy_fields

MS_PER_STEP = re.compile(r"([0-9.]+) ms/step")


def ms_per_step(text: str) -> float | None:
    """The ms/step of program.py's closing line (the last one in ``text``)."""
    found = MS_PER_STEP.findall(text)
    return float(found[-1]) if found else None


def _run(cmd: list[str], log: Path) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n(rc {p.returncode})\n{p.stdout}{p.stderr}\n")
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[1:4]} exited with {p.returncode}: {p.stderr.strip()[-300:]}")
    return p.stdout


def one(name: str, out: Path, steps: int) -> dict[str, Any]:
    prog = [sys.executable, str(HERE / "program.py"), name]
    log = out / f"{name}.log"
    base = ms_per_step(_run([*prog, "--steps", str(steps)], log))
    fixed = ms_per_step(_run([*prog, "--fixed", "--steps", str(steps)], log))
    run = out / "runs" / name
    _run([sys.executable, "-m", "stepscope", "record", "-o", str(run), "--quiet", "--", *prog],
         log)
    report = out / f"{name}.report.json"
    _run([sys.executable, "-m", "stepscope", "report", str(run), "--untraced-step-ms",
          str(base), "-o", str(report)], log)
    rep = json.loads(report.read_text())
    v = variants.variants_of(importlib.import_module(name))[0]
    pred = predict(remedy_fields(rep), tuple(v.remedies), tuple(v.covers or v.remedies))
    cal = (rep.get("step_model") or {}).get("calibration") or {}
    ratio = pred.step_ms / fixed if pred.step_ms is not None and fixed else None
    return {"scenario": name, "variant": v.name, "remedy_ids": list(v.remedies),
            "log_baseline_ms": base, "log_fixed_ms": fixed, "predicted_ms": pred.step_ms,
            "from": pred.source, "ratio": round(ratio, 3) if ratio else None,
            "ok": ratio is not None and abs(ratio - 1) <= 0.3, "calibration": cal}


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| scenario | fix (remedy ids) | log: baseline → fixed ms/step | calibrated | "
           "predicted fixed ms (from) | predicted / log | within ±30% |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['scenario']} | – | – | – | {r['error']} | – | – |")
            continue
        c = r["calibration"]
        how = (f"{c.get('scaled')} x{c.get('factor')}" if c.get("reached") else "not reached")
        pred = "–" if r["predicted_ms"] is None else f"{r['predicted_ms']:.2f} ({r['from']})"
        out.append(f"| {r['scenario']} | {r['variant']} ({'+'.join(r['remedy_ids'])}) | "
                   f"{r['log_baseline_ms']:.2f} → {r['log_fixed_ms']:.2f} | {how} | {pred} | "
                   f"{r['ratio'] if r['ratio'] is not None else '–'} | "
                   f"{'yes' if r['ok'] else 'no'} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="scenarios whose steps a hook marks")
    ap.add_argument("--out", required=True, help="folder for the runs, reports and results")
    ap.add_argument("--steps", type=int, default=300, help="steps of each untraced log (300)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"log_calibration.py: {out}: give a new or empty folder (its runs, reports and "
              "logs are written there)", file=sys.stderr)
        return 2
    (out / "runs").mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.names:
        try:
            rows.append(one(name, out, args.steps))
        except Exception as exc:  # noqa: BLE001 - one scenario must not stop the others
            rows.append({"scenario": name, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps(rows[-1]), flush=True)
    (out / "log_calibration.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
