"""A steady GPU program for `stepscope record`: the overhead benchmark's workloads in a plain loop,
so that the cost a run measures of itself (``step_time_ratio_in_window_vs_after``) can be set
beside the side-by-side benchmark (benchmarks/overhead.py) on the same workload.

    stepscope record -o RUN --steps 30-130 -- python benchmarks/capture/steady_train.py \
        --workload gpt --steps 200

gpt: the ~25 ms bf16 decoder step with fused AdamW (step boundaries from the optimizer hook);
launch: 2,000 tiny kernels per step, marked with ``stepscope.step()`` when stepscope is
importable (it is under ``stepscope record``), else unmarked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import WORKLOADS, make_workload, sync  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=WORKLOADS, default="gpt")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--gpt-batch", type=int, default=8)
    args = ap.parse_args()
    step, _ = make_workload(args.workload, batch=args.gpt_batch)
    mark = None
    if args.workload == "launch":
        try:
            import stepscope

            mark = stepscope.step
        except ImportError:
            pass
    for _ in range(args.steps):
        step()
        if mark is not None:
            sync()  # the launch loop's step is its launches and the kernels they queue
            mark()
    sync()


if __name__ == "__main__":
    main()
