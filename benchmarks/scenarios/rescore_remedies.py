#!/usr/bin/env python3
"""Re-advise a finished record_suite run with the current code and score it again: findings and
remedies, against the run's own measurements (no GPU).

    PYTHONPATH=src python3 benchmarks/scenarios/rescore_remedies.py --suite DIR1,DIR2 --out NEW

Each DIR is what one device call returned (``--copy-to``): results.json and the bundle parts
(``bundle.tar.gz``, ``bundle-2.tar.gz``...); a bundle tarball alone (an earlier suite's, e.g.
``docs/data/accuracy-2026-11-26/profiler-traces/rsA.tar.gz``) is read from the scenario
results it holds, its one measured fix taken as the scenario's default variant. The bundles are unpacked into NEW/DIRNAME/; every
bundled profiler trace (torch.profiler's, or a JAX scenario's XSpace) is imported and advised
again (``trace_advice.advise_trace``), every
bundled recorded run reported again (``record_suite.advise``, in a child process running this
tree's ``src``; as ``stepscope report`` does, calibrated to the steps record timed after its
window where it did). With ``--calibrate``, both are made with the remedies calibrated to the
scenario's measured untraced baseline step (``stepscope report --untraced-step-ms``: what a
user reads in their training log); a recorded run whose steps are not the program's
(recovered from the kernel stream's periodicity) is reported without it, said in
``rescored``. A scenario whose trace or run did not come back keeps the call's advice (said
in ``rescored``). Then both scores (``timing.score_first_serious`` and
``remedy_score.score_result``) are computed again, each measured variant scored against the
remedy ids its scenario declares now, and NEW/results.json and NEW/accuracy.md
written, merged over the calls (the later wins per scenario, registry order).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent.parent / "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

import record_report as rr  # after the sys.path setup
import timing
from bundle import unpack
from remedy_score import score_result


def log(msg: str) -> None:
    print(msg, flush=True)


def bundled_trace(tree: Path, name: str) -> Path | None:
    """The scenario's bundled profiler trace: torch.profiler's
    (``torch/traces/NAME.pt.trace.json.gz``), else JAX's XSpace (``xplane/NAME.xplane.pb.gz``,
    ``record_suite.keep_xplane``); None when the bundle has neither."""
    for trace in (tree / "torch" / "traces" / f"{name}.pt.trace.json.gz",
                  tree / "xplane" / f"{name}.xplane.pb.gz"):
        if trace.is_file():
            return trace
    return None


def calibration_target(res: dict[str, Any], calibrate: bool) -> float | None:
    """The step the remedies are calibrated to: the measured untraced baseline (``timing``),
    None without ``calibrate`` or a measurement."""
    base = (res.get("timing") or {}).get("baseline_ms")
    return float(base) if calibrate and base else None


def calibration_said(advice: dict[str, Any], target: float | None) -> str:
    """What the calibration did, from the report's ``step_model.calibration``."""
    if not target:
        return ""
    cal = (advice.get("step_model") or {}).get("calibration") or {}
    if cal.get("reached"):
        return f", calibrated to {target:.2f} ms ({cal.get('scaled')} x{cal.get('factor')})"
    return f", not calibrated ({target:.2f} ms out of the model's reach)"


def readvise_profiler(res: dict[str, Any], tree: Path, calibrate: bool = False) -> str:
    """The torch.profiler leg again from the bundled trace; returns what was done."""
    from trace_advice import advise_trace

    name = res["scenario"]
    trace = bundled_trace(tree, name)
    if trace is None:
        return "profiler kept (no trace in the bundle)"
    try:
        target = calibration_target(res, calibrate)
        advice = advise_trace(trace, tree / "torch" / "runs" / name, untraced_step_ms=target)
    except Exception as exc:  # noqa: BLE001 - one scenario must not stop the rescoring
        res["profiler"] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        return f"profiler re-advice failed: {type(exc).__name__}: {exc}"
    res["profiler"] = {"status": "ok", "error": None, **rr.condense_advice(advice)}
    return "profiler re-advised" + calibration_said(res["profiler"], target)


def readvise_record(res: dict[str, Any], tree: Path, timeout: float,
                    calibrate: bool = False) -> str:
    """The record leg again from the bundled recorded run; returns what was done."""
    import record_suite

    name = res["scenario"]
    run_dir = tree / "rec" / name
    if not (run_dir / "manifest.json").is_file():
        return "record kept (no run in the bundle)"
    old = dict(res.get("record") or {})
    keep = {k: old[k] for k in ("command", "rc", "wall_s", "log", "run_bytes", "program_line")
            if k in old}
    dest = tree / "rec" / f"{name}.report.json"
    target = calibration_target(res, calibrate)
    new = record_suite.advise(run_dir, dest, timeout, untraced_step_ms=target)
    said = calibration_said(new, target)
    if target and "needs the program's steps" in str(new.get("error")):
        new = record_suite.advise(run_dir, dest, timeout)
        said = ", not calibrated (its steps are not the program's)"
    new.update(keep, run=str(run_dir))
    new["status"] = "ok" if "findings" in new else "error"
    res["record"] = new
    return "record re-advised" + said if new["status"] == "ok" else \
        f"record re-advice failed: {new.get('error')}"


def rescore(res: dict[str, Any]) -> None:
    """Both scores again from the (re-advised) paths."""
    exp, t = res.get("expected", ""), res.get("timing")
    rec, prof = res.get("record") or {}, res.get("profiler") or {}
    res["score"] = {
        "record": timing.score_first_serious(
            exp, t, rec.get("findings") if rec.get("status") == "ok" else None),
        "profiler": None if prof.get("status") == "n/a" else timing.score_first_serious(
            exp, t, prof.get("findings") if prof.get("status") == "ok" else None),
    }
    res["remedy_score"] = score_result(res)


def legacy_variants(res: dict[str, Any]) -> dict[str, Any] | None:
    """A result of a suite run before fix variants existed: its one measured fix as the
    scenario's default variant (as declared now), measured by its ``timing``."""
    import importlib

    import variants

    t = res.get("timing") or {}
    try:
        declared = variants.variants_of(importlib.import_module(res["scenario"]))
    except Exception as exc:  # noqa: BLE001 - e.g. the scenario's framework is not here
        log(f"{res['scenario']}: no variants ({type(exc).__name__}: {exc})")
        return None
    v = declared[0]
    return {v.name: {**v.to_dict(), "status": "measured", "fixed_ms": t["fixed_ms"],
                     "saving_ms": t["saving_ms"], "saving_pct": t["saving_pct"],
                     "from": "timing (a run before variants: the default fix only)"}}


def redeclare(res: dict[str, Any]) -> None:
    """The measured variants named as the scenario declares them now: a variant whose program
    changed under its name takes its program's name now (``variants.RENAMED``;
    ``measured_as`` keeps the old one), then each variant's remedy ids, trap flag and plan
    cover from ``variants.variants_of`` (its measurement unchanged; a variant the module no
    longer declares, or a module not importable here, is kept)."""
    import importlib

    import variants

    got = res.get("variants") or {}
    for old in list(got):  # a program that changed under its name keeps its measurement apart
        name = variants.measured_name(str(res.get("scenario")), old, got)
        if name != old and isinstance(got[old], dict):
            got[name] = {**got.pop(old), "name": name, "measured_as": old}
    try:
        declared = variants.variants_of(importlib.import_module(res["scenario"]))
    except Exception:  # noqa: BLE001 - e.g. the scenario's framework is not here
        return
    for v in declared:
        if isinstance(got.get(v.name), dict):
            got[v.name].update(v.to_dict())


def load_call(src: Path, tree: Path) -> tuple[dict[str, Any], list[Path]]:
    """One call's results (its results.json, or for a bundle tarball alone the scenario
    results it holds) and its bundle parts unpacked into ``tree``."""
    parts = unpack([src], tree)
    if src.is_dir():
        return json.loads((src / "results.json").read_text()), parts
    order = {n: i for i, n in enumerate(timing.SCENARIOS)}
    found = sorted((tree / "scenarios").glob("*.json"),
                   key=lambda f: order.get(f.stem, len(order)))
    results = [json.loads(f.read_text()) for f in found]
    return {"meta": {"date": "?", "command": f"bundle {src.name}"}, "scenarios": results}, parts


def rescore_suite(dirs: list[Path], out: Path, timeout: float = 180.0, calibrate: bool = False
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Unpack, re-advise and re-score every call's scenarios; returns the merged (meta,
    results) as ``record_report.merge`` orders them."""
    out.mkdir(parents=True, exist_ok=True)
    rescored_files: list[Path] = []
    for d in dirs:
        tree = out / d.name.removesuffix(".tar.gz")
        data, parts = load_call(d, tree)
        for res in data.get("scenarios", []):
            if res.get("status") != "ok" or not res.get("timing"):
                continue
            if res.get("variants") is None:
                res["variants"] = legacy_variants(res)
            else:
                redeclare(res)
            notes = [readvise_profiler(res, tree, calibrate)] if (res.get("profiler") or {}).get(
                "status") != "n/a" else []
            notes.append(readvise_record(res, tree, timeout, calibrate))
            rescore(res)
            res["rescored"] = "; ".join(notes)
            log(f"{d.name}/{res['scenario']}: {res['rescored']}")
        data.setdefault("meta", {})["bundle_parts_read"] = [str(p) for p in parts]
        dest = tree / "results.json"
        dest.write_text(json.dumps(data, indent=1, default=str))
        rescored_files.append(dest)
    meta, results = rr.merge(rescored_files)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE, check=False).stdout.strip()
    meta["rescored"] = (f"advisor and remedies re-run without a GPU on "
                        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (commit "
                        f"{commit or 'unknown'}) on the bundled traces and runs of "
                        f"{', '.join(str(m.get('date')) for m in meta['merged_from'])}; "
                        "measurements unchanged" + ("; remedies calibrated to each scenario's "
                        "measured untraced baseline step" if calibrate else ""))
    meta["command"] = ("rescore_remedies.py --suite " + ",".join(str(d) for d in dirs)
                       + (" --calibrate" if calibrate else ""))
    return meta, results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", required=True,
                    help="comma-separated folders of record_suite calls (results.json + bundle)")
    ap.add_argument("--out", required=True,
                    help="a new or empty folder for the re-scored results")
    ap.add_argument("--advise-timeout", type=float, default=180.0,
                    help="time limit of the advisor on one recorded run, s (180)")
    ap.add_argument("--calibrate", action="store_true",
                    help="calibrate the remedies to each scenario's measured untraced baseline "
                         "step (stepscope report --untraced-step-ms)")
    args = ap.parse_args(argv)
    dirs = [Path(d) for d in args.suite.split(",") if d]
    missing = [str(d) for d in dirs if not (d / "results.json").is_file()
               and not (d.is_file() and d.name.endswith(".tar.gz"))]
    if missing:
        print(f"rescore_remedies.py: no results.json in {', '.join(missing)}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"rescore_remedies.py: {out}: give a new or empty folder (the bundles are "
              "unpacked and the results written there)", file=sys.stderr)
        return 2
    meta, results = rescore_suite(dirs, out, args.advise_timeout, args.calibrate)
    rr.write_outputs(out, results, meta)
    log((out / "accuracy.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
