"""Issue 17, deliverables 3 and 4 on a GPU machine: `stepscope record` + `stepscope report` on
small programs, and checks of what the report says (run from the repository root):

    .venv/bin/python benchmarks/capture/headline_check.py [--out /tmp/headline] [--ddp]

* ``cpu_input``: the model on the CPU, a ``num_workers=0`` DataLoader sleeping 2 ms a sample
  (8 a batch): input_bound first, high confidence (the GPU capture ran and saw no GPU work),
  ``run.gpu_use["0"].use == "none"``, no "GPU idle" in its title;
* ``cpu_model``: a CPU MLP, no loader, on a machine with a GPU: host_bound says the model runs
  on the CPU (low confidence, the saving an upper bound);
* ``exit3``: a short CUDA loop that ends with ``sys.exit(3)``: the ending says "exited with
  status 3", not cut short; the terminal has no "did not finish";
* ``gpu``: a CUDA loop on ``cuda:0`` with every GPU visible: one device used, and the headline's
  GPU busy equals busy / (wall x devices used) (never divided by the GPUs listed);
* ``--ddp``: 2-rank DDP through torchrun (needs 2 GPUs): the pooled GPU busy share is
  ``sum(busy) / sum(wall x used)``, at most 100%, and each rank's share is in ``ranks``;
  the capture line never compares with the steps before the window.

Prints one line per check (ok / FAIL) and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

STEPSCOPE = [sys.executable, "-m", "stepscope"]

PROGRAMS = {
    "cpu_input": """
        import time, torch
        from torch.utils.data import DataLoader, Dataset
        class DS(Dataset):
            def __len__(self): return 10**6
            def __getitem__(self, i):
                time.sleep(0.002)
                return torch.randn(64)
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, x in enumerate(DataLoader(DS(), batch_size=8, num_workers=0)):
            loss = model(x).sum(); opt.zero_grad(); loss.backward(); opt.step()
            if i >= 80: break
    """,
    "cpu_model": """
        import torch
        torch.cuda.init()  # a GPU program by intent; the model stays on the CPU by mistake
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(80):
            x = torch.randn(256, 1024)
            loss = model(x).sum(); opt.zero_grad(); loss.backward(); opt.step()
    """,
    "exit3": """
        import sys, torch
        model = torch.nn.Linear(2048, 2048).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(80):
            x = torch.randn(512, 2048, device="cuda")
            loss = model(x).sum(); opt.zero_grad(); loss.backward(); opt.step()
        torch.cuda.synchronize()
        sys.exit(3)
    """,
    "gpu": """
        import torch
        model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(120):
            x = torch.randn(1024, 4096, device="cuda")
            loss = model(x).sum(); opt.zero_grad(); loss.backward(); opt.step()
            loss.item()
    """,
    "ddp": """
        import os, torch, torch.distributed as dist
        dist.init_process_group("nccl")
        r = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(r)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda(),
            device_ids=[r])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(120):
            x = torch.randn(1024, 4096, device="cuda")
            loss = model(x).sum(); opt.zero_grad(); loss.backward(); opt.step()
            loss.item()
        import gc
        del model, opt, loss
        gc.collect()  # DDP freed while the group lives (benchmarks/multigpu/harness.py)
        dist.destroy_process_group()
    """,
}

FAILED: list[str] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if not ok and detail else ""))
    if not ok:
        FAILED.append(name)


def record(out: Path, name: str, launcher: list[str]) -> tuple[dict[str, Any], str]:
    prog = out / f"{name}.py"
    prog.write_text(textwrap.dedent(PROGRAMS[name]))
    run = out / f"{name}.stepscope"
    subprocess.run([*STEPSCOPE, "record", "--force", "-o", str(run), "--", *launcher, str(prog)],
                   check=False)
    text = subprocess.run([*STEPSCOPE, "report", str(run)], capture_output=True, text=True,
                          check=False).stdout
    js = subprocess.run([*STEPSCOPE, "report", str(run), "--format", "json"],
                        capture_output=True, text=True, check=True).stdout
    print(text)
    return json.loads(js), " ".join(text.split())


def busy_consistent(d: dict[str, Any]) -> bool:
    s = d["summary"]
    pooled = 100 * s["gpu_busy_in_steps_ms"] / s["gpu_time_ms"] if s["gpu_time_ms"] else 0.0
    per_rank = all(abs(r["gpu_busy_pct"] - 100 * r["gpu_busy_in_steps_ms"]
                       / (r["wall_ms"] * r["devices_used"])) < 0.05
                   for r in d["ranks"] if r["devices_used"])
    return abs(s["gpu_busy_pct"] - pooled) < 0.05 and s["gpu_busy_pct"] <= 100.0 and per_rank


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/headline")
    ap.add_argument("--ddp", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    d, text = record(out, "cpu_input", [sys.executable])
    top = d["findings"][0] if d["findings"] else {}
    check("cpu_input: input_bound first", top.get("id") == "input_bound", top.get("title"))
    check("cpu_input: high confidence", top.get("confidence") == "high", top.get("note"))
    check("cpu_input: GPU did nothing", d["run"]["gpu_use"].get("0", {}).get("use") == "none",
          d["run"]["gpu_use"])
    check("cpu_input: no GPU idle claimed", "GPU idle" not in top.get("title", ""))

    d, text = record(out, "cpu_model", [sys.executable])
    hb = [f for f in d["findings"] if f["id"] == "host_bound"]
    check("cpu_model: the model runs on the CPU",
          bool(hb) and "the model runs on the CPU" in hb[0]["title"], [f["title"] for f in
                                                                        d["findings"]])

    d, text = record(out, "exit3", [sys.executable])
    check("exit3: said as an exit status", d["run"]["ending"] == {
        "text": "the program exited with status 3", "cut_short": False, "returncode": 3},
        d["run"]["ending"])
    check("exit3: no 'did not finish'", "did not finish" not in text and "PARTIAL" not in text)

    d, text = record(out, "gpu", [sys.executable])
    check("gpu: one device used", d["summary"]["devices_used"] == 1, d["summary"])
    check("gpu: busy = busy / (wall x used)", busy_consistent(d), d["ranks"])
    check("gpu: no before-window ratio", "the steps before it" not in text)

    if a.ddp:
        d, text = record(out, "ddp", [sys.executable, "-m", "torch.distributed.run",
                                       "--nproc_per_node", "2"])
        check("ddp: two ranks, one GPU each", [r["devices_used"] for r in d["ranks"]] == [1, 1],
              d["ranks"])
        check("ddp: pooled busy adds up", busy_consistent(d), d["summary"])
        check("ddp: per-rank shares in the headline", "per rank 0:" in text, text[:400])
        check("ddp: no before-window ratio", "the steps before it" not in text)
    print(f"{len(FAILED)} failed" if FAILED else "all ok")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
