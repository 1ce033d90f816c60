"""What torch's NCCL flight recorder costs the program under ``stepscope record``: the same
multi-GPU program recorded with the recorder (record's default) and with
``--no-flight-recorder``, alternating, several times each; the in-window median step of every
rank from each run's JSON report. Prints and writes the per-run medians and the ratio of the
medians (with over without).

    python benchmarks/capture/fr_cost.py --out fr_cost.json [--pairs 3] [--nproc N] \
        [--program benchmarks/multigpu/ddp_balanced.py] [--steps 66]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def one(program: str, nproc: int, steps: int, fr: bool, tmp: Path, i: int) -> list[float]:
    run = tmp / f"{'fr' if fr else 'nofr'}{i}"
    cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(run), "--quiet"]
    if not fr:
        cmd.append("--no-flight-recorder")
    cmd += ["--", "torchrun", "--standalone", f"--nproc-per-node={nproc}", program,
            "--steps", str(steps)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
    rep = subprocess.run([sys.executable, "-m", "stepscope", "report", str(run), "--format",
                          "json"], check=True, capture_output=True, text=True, timeout=300)
    doc = json.loads(rep.stdout)
    ranks = (doc.get("collectives") or {}).get("ranks") or []
    per_rank = [float(r["step_ms"]) for r in ranks if r.get("step_ms") is not None]
    return per_rank or [float(doc["summary"]["step_ms"]["median"])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--program", default="benchmarks/multigpu/ddp_balanced.py")
    ap.add_argument("--steps", type=int, default=66)
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    rows: dict[str, list[list[float]]] = {"fr": [], "nofr": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            for fr in order:
                rows["fr" if fr else "nofr"].append(one(args.program, args.nproc, args.steps,
                                                        fr, Path(d), i))
    med = {k: statistics.median(statistics.mean(r) for r in v) for k, v in rows.items()}
    res = {"program": args.program, "nproc": args.nproc, "steps": args.steps, "runs": rows,
           "median_step_ms": med, "ratio_fr_over_nofr": med["fr"] / med["nofr"]}
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"with flight recorder {med['fr']:.3f} ms, without {med['nofr']:.3f} ms: "
          f"x{res['ratio_fr_over_nofr']:.4f} ({args.pairs} runs each, mean over ranks, median "
          "over runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
