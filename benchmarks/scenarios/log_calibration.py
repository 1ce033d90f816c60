#!/usr/bin/env python3
"""The user's path to a calibrated prediction, end to end on a GPU: the program's own log gives
its untraced step, ``stepscope record`` records it, ``stepscope report --untraced-step-ms``
predicts each fix from that step, and the fixed program's own log says what the fix gave.

    python3 benchmarks/scenarios/log_calibration.py --out DIR [--steps N] [--warmup-steps W]
        [--repeats R] [--every-variant] NAME [NAME ...]

DIR must be new or empty: everything is written there, nothing outside it.

Per scenario (``program.py``: the step in a plain loop, no stepscope import): the baseline and
the default fix variant (every variant with ``--every-variant``) each run ``--steps`` steps
untraced, each in a process of its own, ``--repeats`` times in alternating order; a run's "log"
is its closing line's ms/step, or with ``--warmup-steps W`` the steady ms/step of the steps
after the first W, and each program's log is the median of its runs. Then ``stepscope record
-o DIR/runs/NAME --quiet -- python program.py NAME``, ``stepscope report DIR/runs/NAME
--untraced-step-ms MS`` with the baseline's log, and a plain ``stepscope report`` (the recorded
run calibrated by itself to the steps record timed after its window: the ``default_`` fields).
The prediction read is the variant's (``variants.py``: its remedy ids): the one remedy, else the
plan restricted to its ids, else the plan, as ``remedy_score.predict`` reads it. Writes
DIR/NAME.report.json, DIR/NAME.default.report.json, DIR/NAME.log and DIR/log_calibration.json
(after each scenario), and prints a Markdown table. Without ``--warmup-steps`` a log includes
the loop's first steps (warm-up, cuDNN's choice, worker start): ``--steps`` long enough makes
them small.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import variants  # after the sys.path setup
from record_report import steady_ms
from remedy_score import predict, remedy_fields
from timing import round_order


def _run(cmd: list[str], log: Path) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n(rc {p.returncode})\n{p.stdout}{p.stderr}\n")
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[1:4]} exited with {p.returncode}: {p.stderr.strip()[-300:]}")
    return p.stdout


def logs(prog: list[str], names: list[str | None], log: Path, steps: int, warmup: int,
         repeats: int) -> dict[str | None, list[float]]:
    """Each program (None: the baseline, else a variant) run ``repeats`` times, the order
    reversed every other round; the ms/step of each run."""
    got: dict[str | None, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        for n in round_order(names, i):
            cmd = [*prog, "--steps", str(steps), "--warmup-steps", str(warmup)]
            cmd += ["--variant", n] if n is not None else []
            ms = steady_ms(_run(cmd, log))
            if ms is None:
                raise RuntimeError(f"{' '.join(cmd[1:])}: no ms/step in its output")
            got[n].append(ms)
    return got


def _predicted(rep: dict[str, Any], v: variants.Variant, fixed: float) -> dict[str, Any]:
    pred = predict(remedy_fields(rep), tuple(v.remedies), tuple(v.covers or v.remedies))
    ratio = pred.step_ms / fixed if pred.step_ms is not None and fixed else None
    return {"predicted_ms": pred.step_ms, "from": pred.source,
            "ratio": round(ratio, 3) if ratio else None,
            "ok": ratio is not None and abs(ratio - 1) <= 0.3,
            "calibration": (rep.get("step_model") or {}).get("calibration") or {}}


def scenario(name: str, out: Path, steps: int, *, every_variant: bool = False,
             warmup: int = 0, repeats: int = 1) -> list[dict[str, Any]]:
    """One row per fix variant (the default one only, unless ``every_variant``): the logs, the
    prediction calibrated to the baseline's log and the recorded run's own (``default_``)."""
    prog = [sys.executable, str(HERE / "program.py"), name]
    log = out / f"{name}.log"
    vs = variants.variants_of(importlib.import_module(name))
    vs = vs if every_variant else vs[:1]
    runs = logs(prog, [None, *(v.name for v in vs)], log, steps, warmup, repeats)
    base = statistics.median(runs[None])
    run = out / "runs" / name
    _run([sys.executable, "-m", "stepscope", "record", "-o", str(run), "--quiet", "--", *prog],
         log)
    report, default = out / f"{name}.report.json", out / f"{name}.default.report.json"
    _run([sys.executable, "-m", "stepscope", "report", str(run), "--untraced-step-ms",
          str(base), "-o", str(report)], log)
    _run([sys.executable, "-m", "stepscope", "report", str(run), "-o", str(default)], log)
    rep, dft = json.loads(report.read_text()), json.loads(default.read_text())
    rows = []
    for v in vs:
        fixed = statistics.median(runs[v.name])
        row: dict[str, Any] = {"scenario": name, "variant": v.name, "remedy_ids": list(v.remedies),
                               "log_baseline_ms": base, "log_fixed_ms": fixed,
                               "baseline_runs_ms": runs[None], "fixed_runs_ms": runs[v.name]}
        row.update(_predicted(rep, v, fixed))
        row.update({f"default_{k}": x for k, x in _predicted(dft, v, fixed).items()})
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| scenario | fix (remedy ids) | log: baseline → fixed ms/step | calibrated | "
           "predicted fixed ms (from) | predicted / log | within ±30% | record's own "
           "calibration: predicted / log |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['scenario']} | – | – | – | {r['error']} | – | – | – |")
            continue
        c = r["calibration"]
        how = (f"{c.get('scaled')} x{c.get('factor')}" if c.get("reached") else "not reached")
        pred = "–" if r["predicted_ms"] is None else f"{r['predicted_ms']:.2f} ({r['from']})"
        dr = r.get("default_ratio")
        own = "–" if dr is None else f"{dr} {'ok' if r.get('default_ok') else 'off'}"
        out.append(f"| {r['scenario']} | {r['variant']} ({'+'.join(r['remedy_ids'])}) | "
                   f"{r['log_baseline_ms']:.2f} → {r['log_fixed_ms']:.2f} | {how} | {pred} | "
                   f"{r['ratio'] if r['ratio'] is not None else '–'} | "
                   f"{'yes' if r['ok'] else 'no'} | {own} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="scenarios whose steps a hook marks")
    ap.add_argument("--out", required=True, help="folder for the runs, reports and results")
    ap.add_argument("--steps", type=int, default=300, help="steps of each untraced log (300)")
    ap.add_argument("--warmup-steps", type=int, default=0,
                    help="a log's ms/step leaves out this many first steps (0: all steps)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each program, alternating; the log is their median (1)")
    ap.add_argument("--every-variant", action="store_true",
                    help="every fix variant of the scenario, not only the default one")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"log_calibration.py: {out}: give a new or empty folder (its runs, reports and "
              "logs are written there)", file=sys.stderr)
        return 2
    (out / "runs").mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name in args.names:
        try:
            got = scenario(name, out, args.steps, every_variant=args.every_variant,
                           warmup=args.warmup_steps, repeats=args.repeats)
        except Exception as exc:  # noqa: BLE001 - one scenario must not stop the others
            got = [{"scenario": name, "error": f"{type(exc).__name__}: {exc}"}]
        rows += got
        for r in got:
            print(json.dumps(r), flush=True)
        (out / "log_calibration.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
