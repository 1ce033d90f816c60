"""Offline check of the exposed-communication model (``model.comm_remedies``) on the stored
torch.profiler traces of ``ddp_exposed_comm`` (2 x H100, docs/data/multigpu-2026-11-26/
exposed-comm-traces/base): imports them, prints each remedy's estimate per rank and the best
one against the fix measured untraced (DDP's default buckets, docs/accuracy.md "Several GPUs").

    PYTHONPATH=src python3 benchmarks/multigpu/exposed_model_check.py [TRACE_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "docs/data/multigpu-2026-11-26/exposed-comm-traces/base"
# measured untraced, base -> fix (ms per step), docs/accuracy.md runs 1-3
MEASURED = {"2 x H100 (run 3)": 19.04 - 17.55}


def main(argv: list[str]) -> int:
    from stepscope.analysis import analyze
    from stepscope.importers import import_traces
    from stepscope.model.collectives import run_cross_rank
    from stepscope.model.communication import comm_overlap
    from stepscope.store.run import Run

    src = Path(argv[0]) if argv else TRACES
    with tempfile.TemporaryDirectory() as tmp:
        out = import_traces(sorted(src.glob("*.json.gz")), Path(tmp) / "run")
        a = analyze(Run(out))
        x = run_cross_rank(a)
        best: list[float] = []
        for ra in a.ranks:
            rc = x.rank(ra.rank) if x else None
            r = comm_overlap(a.graph.rank(ra.rank), ra,
                             waits=rc.wait_intervals if rc else ())
            if r is None:
                continue
            n = r.n_steps
            print(f"rank {ra.rank}: exposed {r.exposed_ns / n / 1e6:.2f} ms per step, SM share "
                  f"{r.sm_share:.2f}, former bound {r.bound_ns / n / 1e6:.2f} ms")
            for m in r.remedies:
                print(f"  {m.kind:13s} {m.saving_ns / n / 1e6:6.2f} ms  ({m.detail})")
            best.append(r.saving_ns / n / 1e6)
        est = sum(best) / max(1, len(a.ranks))
        for where, ms in MEASURED.items():
            print(f"estimate {est:.2f} ms vs measured {ms:.2f} ms on {where}: "
                  f"{est / ms:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
