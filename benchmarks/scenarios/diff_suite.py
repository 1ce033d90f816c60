#!/usr/bin/env python3
"""``stepscope diff`` on the planted suite: each scenario's baseline recorded, its fixed variant
recorded, and ``stepscope diff BASE FIXED`` asked whether the fix made the step faster and
which breakdown category it took the time from (issue 22: "diff of a planted run against its
fixed run names the right category with the right sign"). Needs a CUDA GPU and the scenarios'
frameworks, as ``record_suite.py`` does::

    export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1
    python3 benchmarks/scenarios/diff_suite.py --out /tmp/ds1 --copy-to $OUT/ds1 --budget 540 \\
        --only dataloader_bound,host_python,explicit_sync,launch_bound,pageable_copies,small_grid
    python3 benchmarks/scenarios/diff_suite.py --out /tmp/ds2 --copy-to $OUT/ds2 --budget 540 \\
        --only fp32_no_tf32,copy_serialized,item_every_step,cpu_ops_midstep,healthy,alloc_churn
    python3 benchmarks/scenarios/diff_suite.py --merge ds1,ds2 --out ALL   # anywhere, no GPU

Per scenario: ``stepscope record -o OUT/NAME.base --quiet -- python program.py NAME`` and the
same with ``--fixed`` (the default window, as a user records), then ``stepscope diff
OUT/NAME.base OUT/NAME.fixed --format json -o OUT/NAME.diff.json``. A scenario passes when
the verdict is ``faster`` and the category that lost the most time is one of :data:`EXPECT`'s
(``healthy``, whose fixed variant is the same program: ``same`` or ``inconclusive``).
``OUT/results.json`` and ``OUT/diff_suite.md`` are rewritten after every scenario.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import record_suite as rs  # after the sys.path setup

# the breakdown categories a scenario's fix should take the time from
EXPECT: dict[str, tuple[str, ...]] = {
    "dataloader_bound": ("input_wait",),
    "host_python": ("host",),
    "item_every_step": ("sync",),
    "explicit_sync": ("sync",),
    "launch_bound": ("launch", "host"),
    "pageable_copies": ("copies", "sync"),
    "cpu_ops_midstep": ("sync", "copies", "host"),
    "small_grid": ("compute",),
    "low_occupancy": ("compute",),
    "fp32_no_tf32": ("compute",),
    "fp16_misaligned": ("compute",),
    "copy_serialized": ("copies",),
    "alloc_churn": ("sync", "host", "launch", "step_gaps"),
    "torch_manual_sgd": ("compute",),
    "triton_small_grid": ("compute",),
    "jax_eager": ("launch", "host"),
    "jax_jit": ("compute",),
    "cupy_pageable": ("copies", "sync"),
    "torch_inference": ("launch", "host"),
    "jax_host_callback": ("sync", "host"),
    "jax_input_host": ("host", "input_wait"),
    "conv_fp32": ("compute",),
    "deep_mlp_fp32": ("compute",),
    "mlp_nobias_fp32": ("compute",),
    "item_trap": ("launch", "host"),  # its default fix: CUDA graphs (the trap is a variant)
    # two planted problems; the default fix applies both remedies
    "graphs_pageable": ("launch", "host", "copies", "sync"),
    "loader_tf32": ("input_wait", "compute"),
    "sync_tf32": ("compute", "sync", "host"),
    "healthy": (),
}


def record(name: str, fixed: bool, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    meta = rs.meta_of(name)
    run_dir = out / f"{name}.{'fixed' if fixed else 'base'}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    prog = [sys.executable, str(HERE / "program.py"), name, "--device", "cuda"]
    if fixed:
        prog.append("--fixed")
    cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(run_dir), "--quiet", "--",
           *prog]
    rc, wall = rs.run_limited(cmd, args.record_timeout + (meta.program_seconds or 0.0),
                              out / f"{run_dir.name}.log")
    return {"command": " ".join(cmd[1:]), "rc": rc, "wall_s": round(wall, 2),
            "run": str(run_dir)}


def diff(name: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    dest = out / f"{name}.diff.json"
    cmd = [sys.executable, "-m", "stepscope", "diff", str(out / f"{name}.base"),
           str(out / f"{name}.fixed"), "--format", "json", "-o", str(dest), "--quiet"]
    rc, wall = rs.run_limited(cmd, args.diff_timeout, out / f"{name}.diff.log")
    res: dict[str, Any] = {"command": " ".join(cmd[1:]), "rc": rc, "wall_s": round(wall, 2)}
    if rc == 0 and dest.exists():
        res["diff"] = json.loads(dest.read_text())
    return res


def score(name: str, d: dict[str, Any] | None) -> dict[str, Any]:
    """Right verdict, and the cause that lost the most time is one of :data:`EXPECT`'s: the
    diff's ``causes`` (the GPU categories and the idle split by what the GPU waited for), or
    its breakdown ``categories`` where an older diff has no causes. Both are reported."""
    if d is None:
        return {"ok": False, "why": "no diff"}
    cats = sorted(d["categories"].items(), key=lambda kv: kv[1]["delta_ms"])
    top_cat, top_cat_v = cats[0]
    causes = sorted((d.get("causes") or d["categories"]).items(),
                    key=lambda kv: kv[1]["delta_ms"])
    top, top_v = causes[0]
    got = {"verdict": d["verdict"], "top": top, "top_delta_ms": top_v["delta_ms"],
           "top_category": top_cat, "top_category_delta_ms": top_cat_v["delta_ms"]}
    want = EXPECT.get(name, ())
    if not want:
        return {"ok": d["verdict"] in ("same", "inconclusive"), **got}
    ok = d["verdict"] == "faster" and top in want and top_v["delta_ms"] < 0
    return {"ok": ok, **got, "expected": list(want)}


def table(results: dict[str, Any]) -> str:
    lines = ["| scenario | verdict | step ms base -> fixed (change, 95% interval) | cause "
             "that lost most (ms/step) | breakdown category that lost most | expected | ok |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        d = (r.get("diff") or {}).get("diff")
        s = r.get("score", {})
        if d is None:
            lines.append(f"| {name} | - | {r.get('error', 'not run')} | | | | no |")
            continue
        st = d["step_ms"]
        lo, hi = st["interval"]
        span = "?" if lo is None or hi is None else f"{lo:+.1f}% .. {hi:+.1f}%"
        lines.append(
            f"| {name} | {d['verdict']} | {st['base']:.2f} -> {st['new']:.2f} "
            f"({st['change_pct']:+.1f}%, {span}) | {s.get('top')} "
            f"({s.get('top_delta_ms', 0):+.2f}) | {s.get('top_category', '-')} "
            f"({s.get('top_category_delta_ms', 0):+.2f}) | "
            f"{', '.join(s.get('expected', [])) or 'none'} "
            f"| {'yes' if s.get('ok') else 'no'} |")
    passed = sum(1 for r in results.values() if r.get("score", {}).get("ok"))
    lines.append(f"\n{passed} of {len(results)} scenarios pass.")
    return "\n".join(lines) + "\n"


def write(out: Path, results: dict[str, Any], meta: dict[str, Any],
          copy_to: Path | None) -> None:
    (out / "results.json").write_text(json.dumps({"meta": meta, "scenarios": results},
                                                 indent=1))
    (out / "diff_suite.md").write_text(table(results))
    if copy_to is not None:
        copy_to.mkdir(parents=True, exist_ok=True)
        for f in ("results.json", "diff_suite.md"):
            shutil.copy(out / f, copy_to / f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", default="", help="comma-separated scenarios")
    ap.add_argument("--budget", type=float, default=540.0,
                    help="start no scenario after this many seconds")
    ap.add_argument("--record-timeout", type=float, default=120.0)
    ap.add_argument("--diff-timeout", type=float, default=180.0)
    ap.add_argument("--copy-to", type=Path, default=None)
    ap.add_argument("--merge", default="", help="comma-separated result folders to merge")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merged: dict[str, Any] = {}
        for folder in args.merge.split(","):
            merged.update(json.loads((Path(folder) / "results.json").read_text())["scenarios"])
        write(args.out, merged, {"merged": args.merge}, None)
        print(table(merged))
        return 0
    names = [n for n in args.only.split(",") if n] or list(EXPECT)
    meta = {"argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        import torch

        meta.update(device=torch.cuda.get_device_name(), torch=torch.__version__,
                    cuda=torch.version.cuda)
    except Exception as exc:  # noqa: BLE001 - the meta is best effort
        meta["device"] = f"unknown ({exc})"
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    for name in names:
        if time.perf_counter() - t0 > args.budget:
            results[name] = {"error": "not run (--budget)"}
            continue
        rs.log(f"{name}: recording baseline and fixed")
        r: dict[str, Any] = {"base": record(name, False, args.out, args),
                             "fixed": record(name, True, args.out, args)}
        if r["base"]["rc"] == 0 and r["fixed"]["rc"] == 0:
            r["diff"] = diff(name, args.out, args)
        else:
            r["error"] = f"record exited {r['base']['rc']} / {r['fixed']['rc']}"
        r["score"] = score(name, (r.get("diff") or {}).get("diff"))
        results[name] = r
        rs.log(f"{name}: {r['score']}")
        write(args.out, results, meta, args.copy_to)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
