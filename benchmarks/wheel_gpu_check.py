"""The abi3 wheel on a GPU machine whose Python is not the build's (issue 24): installed with
``pip --target`` into a fresh folder, then used with no C compiler (PATH holds only ``python``
and ``python3``, ``CC=/bin/false``) and an empty cache: the Kineto scanner and the CUPTI shim load
from that folder (``*.abi3.so``), ``stepscope record`` captures a small CUDA training loop, and
nothing is compiled (no shim in the cache, no file added to the install folder).

    python3 benchmarks/wheel_gpu_check.py .whl-ms/stepscope-*-cp311-abi3-*.whl OUT_DIR [--cpu]

``--cpu``: the same on a machine without a GPU (the loop on the CPU; no kernels are expected).

Writes OUT_DIR/wheel_gpu_check.json (what it found) and OUT_DIR/record.log (record's stderr);
prints the JSON; exit status 1 when a check fails. ~30-60 s (most of it importing torch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = """
import sys, torch
dev = sys.argv[1]
m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(256, 1024, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
for _ in range(300):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
if dev == "cuda":
    torch.cuda.synchronize()
"""

PROBE = """
import json, sys
from pathlib import Path
import stepscope
from stepscope.capture.cupti import native as cupti
from stepscope.importers.kineto import native as kineto
shim = cupti._prebuilt()
cupti.load_shim()
print(json.dumps({"stepscope": stepscope.__file__, "python": sys.version.split()[0],
                  "scanner": getattr(kineto.EXTENSION, "__file__", None),
                  "shim": str(shim) if shim else None,
                  "cache_after_load": cupti.cache_dir().exists()}))
"""


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def main(wheel: Path, out: Path, device: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wheel_gpu_check-"))
    target, cache, bin_dir = work / "site", work / "cache", work / "bin"
    bin_dir.mkdir()
    for name in ("python", "python3"):  # this interpreter (its venv too), nothing else on PATH
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / name).chmod(0o755)
    (work / "loop.py").write_text(LOOP)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                          "--no-compile", "--target", str(target), str(wheel)],
                         capture_output=True, text=True)
    found: dict[str, object] = {"wheel": wheel.name, "pip_rc": pip.returncode}
    if pip.returncode:
        found["pip_stderr"] = pip.stderr[-2000:]
        print(json.dumps(found))
        return 1
    before = files(target)
    # the wheel's stepscope first, then what the machine's prefix put in /tmp/site (msgspec)
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != "src"]
    env = dict(os.environ, PATH=str(bin_dir), CC="/bin/false", XDG_CACHE_HOME=str(cache),
               PYTHONPATH=os.pathsep.join([str(target), *others]), PYTHONDONTWRITEBYTECODE="1")
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                           text=True, cwd=work)
    found["probe_rc"] = probe.returncode
    if probe.returncode == 0:
        found.update(json.loads(probe.stdout.strip().splitlines()[-1]))
    else:
        found["probe_stderr"] = probe.stderr[-2000:]
    run = work / "run"
    t0 = time.perf_counter()
    try:
        rec = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(run), "--",
                              "python", "loop.py", device], env=env, capture_output=True,
                             text=True, cwd=work, timeout=240)
        rc, log = rec.returncode, rec.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = -1, f"timed out after {exc.timeout} s"
    found["record_s"] = round(time.perf_counter() - t0, 1)
    found["record_rc"] = rc
    (out / "record.log").write_text(log)
    if (run / "manifest.json").is_file():
        count = subprocess.run(
            [sys.executable, "-c", "import sys, stepscope; "
             "print(stepscope.load(sys.argv[1]).kernels().num_rows)", str(run)],
            env=env, capture_output=True, text=True, cwd=work)
        found["kernels"] = int(count.stdout.strip() or -1) if count.returncode == 0 else -1
    shims = sorted(str(p.relative_to(cache)) for p in cache.rglob("*.so")) if cache.exists() else []
    found["compiled_into_cache"] = shims
    found["added_to_install"] = sorted(files(target) - before)
    checks = {
        "stepscope from the wheel": str(found.get("stepscope", "")).startswith(str(target)),
        "scanner is the abi3 build": str(found.get("scanner", "")).startswith(str(target))
        and str(found.get("scanner")).endswith(".abi3.so"),
        "shim is the abi3 build": str(found.get("shim", "")).startswith(str(target))
        and str(found.get("shim")).endswith(".abi3.so"),
        "record ran": rc == 0,
        "no missing-extension notice": "is not installed" not in log,
        "kernels captured": int(str(found.get("kernels", 0))) > 0 or device == "cpu",
        "nothing compiled": not shims and not found["added_to_install"]
        and not found.get("cache_after_load", True),
    }
    found["checks"] = checks
    found["ok"] = all(checks.values())
    (out / "wheel_gpu_check.json").write_text(json.dumps(found, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(found))
    return 0 if found["ok"] else 1


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    if len(args) != 2:
        sys.exit(__doc__.strip().split("\n\n")[1].strip())
    sys.exit(main(Path(args[0]), Path(args[1]), "cpu" if "--cpu" in sys.argv else "cuda"))
