"""GPU check of the default window's fallback (``capture.auto_window``, docs/record.md *When no
step hook fires*): ``stepscope record`` with default options on small programs, then the run.

    python benchmarks/capture/auto_window_check.py            # on a machine with an NVIDIA GPU
    python benchmarks/capture/auto_window_check.py --keep DIR # keep the runs in DIR

Cases (each a short torch program written to a temporary folder):
  no_optim   a CUDA loop without torch.optim, 8 s: window_kind gpu_time, kernels > 0, every
             kernel inside [window_start_ns, window_end_ns], the window starting 3-3.5 s after
             gpu_first_used_ns, no window_not_reached / no_step_hook diagnostic;
  short      the same loop for 1.5 s (ends in the warm-up): window_kind gpu_warmup, kernels > 0,
             the window starting at gpu_first_used_ns, the info window_includes_warmup;
  optim      the loop with torch.optim.SGD: window_kind steps, steps rows from step 3, kernels
             inside the step window (the tentative capture's earlier records clipped away);
  cpu        no CUDA at all: window_kind tail, the info no_step_hook;
  exit3      the no_optim loop for 5 s then sys.exit(3): exit status 3, the run not partial,
             program_exit_status said.
Prints one line per case and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from stepscope.store.run import Run

LOOP = """
import sys, time, torch
dev = "cuda" if "{kind}" != "cpu" else "cpu"
w = torch.randn(512, 512, device=dev, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-3) if "{kind}" == "optim" else None
t0 = time.time()
while time.time() - t0 < {seconds}:
    x = torch.randn(256, 512, device=dev)
    loss = (x @ w).relu().sum()
    loss.backward()
    if opt is not None:
        opt.step(); opt.zero_grad()
    else:
        with torch.no_grad():
            w -= 1e-3 * w.grad
        w.grad = None
    if dev == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.005)
sys.exit({status})
"""

CASES = {"no_optim": ("no_optim", 8.0, 0), "short": ("no_optim", 1.5, 0),
         "optim": ("optim", 8.0, 0), "cpu": ("cpu", 2.0, 0), "exit3": ("no_optim", 5.0, 3)}


def record(folder: Path, name: str) -> tuple[int, Run]:
    kind, seconds, status = CASES[name]
    script = folder / f"{name}.py"
    script.write_text(textwrap.dedent(LOOP.format(kind=kind, seconds=seconds, status=status)))
    out = folder / f"{name}.run"
    r = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(out), "--force",
                        "--quiet", "--", str(script)], check=False)
    return r.returncode, Run(out)


def check(name: str, code: int, run: Run) -> list[str]:
    bad: list[str] = []
    r: dict[str, Any] = run.manifest.settings["ranks"]["rank0"]
    codes = {d.code for d in run.manifest.diagnostics}
    k = run.table("kernels")
    ts = k.column("ts_ns").to_pylist()
    lo, hi, seen = r.get("window_start_ns"), r.get("window_end_ns"), r.get("gpu_first_used_ns")
    want = {"no_optim": "gpu_time", "short": "gpu_warmup", "optim": "steps", "cpu": "tail",
            "exit3": "gpu_time"}[name]
    if r.get("window_kind") != want:
        bad.append(f"window_kind {r.get('window_kind')} (want {want})")
    if name != "cpu" and not ts:
        bad.append("no kernels")
    if ts and not all(lo <= t <= hi for t in ts):
        bad.append("kernels outside the window")
    if name in ("no_optim", "exit3") and not (seen and 3.0e9 <= lo - seen <= 3.5e9):
        bad.append(f"window start {None if not seen else (lo - seen) / 1e9} s after first GPU use")
    if name == "short" and (lo != seen or "window_includes_warmup" not in codes):
        bad.append("warm-up window")
    if name == "optim" and run.table("steps").column("step").to_pylist()[:1] != [3]:
        bad.append("steps do not start at 3")
    if name == "cpu" and "no_step_hook" not in codes:
        bad.append("no no_step_hook info")
    if name == "exit3" and (code != 3 or run.manifest.partial or "program_exit_status" not in codes):
        bad.append(f"exit 3: code {code}, partial {run.manifest.partial}")
    if name != "exit3" and run.manifest.partial:
        bad.append("partial")
    if name not in ("cpu", "optim") and {"window_not_reached", "no_step_hook"} & codes:
        bad.append("window diagnostics")
    print(f"{name:9s} code {code} window {r.get('window_kind')!s:10s} {len(ts):7d} kernels  "
          f"{r.get('window')!r}  {'ok' if not bad else 'FAIL: ' + '; '.join(bad)}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, help="write the runs here (default: a temporary folder)")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="auto-window-"))
    folder.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in CASES:
        code, run = record(folder, name)
        failed += bool(check(name, code, run))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
