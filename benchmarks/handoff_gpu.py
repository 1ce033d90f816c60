"""The torch.profiler hand-off on a GPU (issue 24, item 3): a small CUDA training loop with a
planted bottleneck (the batch copied from pageable memory each step, a ``loss.item()`` each
step) under ``stepscope.torch.profile`` (its defaults: CPU + CUDA, wait 1, warm-up 1, active
5), then checks what the hand-off wrote: one trace and one run, the five active steps, GPU
kernels and copies in the run, ``pageable_memcpy`` among the findings, and the printed block.

    python benchmarks/handoff_gpu.py OUT_DIR

Prints one JSON line of what it found; exit status 1 when a check fails, 2 without CUDA.
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path


def main(out: Path) -> int:
    import torch

    import stepscope
    import stepscope.torch as sst

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(32, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(64, 3, 96, 96)  # pageable host memory, copied each step
    labels = torch.randint(0, 10, (64,))
    printed = io.StringIO()
    with redirect_stdout(printed), sst.profile(out / "traces") as prof:
        for _ in range(10):
            x, y = batch.to(dev), labels.to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            prof.step()
    handler = prof.on_trace_ready
    p = stepscope.load(handler.runs[0]) if handler.runs else None
    found = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "traces": len(handler.traces), "runs": len(handler.runs),
        "steps": p.steps().num_rows if p else 0,
        "kernels": p.kernels().num_rows if p else 0,
        "htod_copies": sum(r["count"] for r in p.copies().to_pylist()
                           if r["direction"] == "HtoD") if p else 0,
        "findings": p.findings().column("id").to_pylist() if p else [],
        "printed": printed.getvalue().splitlines()[:6],
    }
    print(json.dumps(found))
    ok = (found["traces"] == found["runs"] == 1 and found["steps"] == 5 and found["kernels"] > 0
          and found["htod_copies"] >= 5 and "pageable_memcpy" in found["findings"]
          and any(line.startswith("stepscope: ") for line in found["printed"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "handoff-gpu")))
