#!/usr/bin/env python3
"""Are CuPy's own kernels (``ElementwiseKernel``: NVRTC-compiled, launched with the driver's
``cuLaunchKernel``) in a recorded run? A GPU check of the capture (run on a CUDA machine with
CuPy): two programs recorded with ``stepscope record`` and the default window,

* ``early``: the kernel compiled and first launched at the program's start (before the capture
  attaches CUPTI at the first GPU use + warm-up), then a 12 s loop;
* ``late``: the same, but the kernel is created and first launched only after 6 s of the loop
  running CUB reductions (after CUPTI attached);

and the kernels of each run counted by name against its ``cuLaunchKernel`` calls. Prints one
JSON object; writes ``OUT/result.json``.

    python3 benchmarks/capture/cupy_kernels_check.py OUT
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = r'''
import sys, time
import cupy as cp
late = sys.argv[1] == "late"
x = cp.random.standard_normal((2048, 2048), dtype=cp.float32)
src = "float v = x; for (int k = 0; k < 256; ++k) { v = v * 0.999f + 0.001f; } y = v;"
kern = None if late else cp.ElementwiseKernel("float32 x", "float32 y", src, "affine_probe")
if kern is not None:
    y = kern(x); cp.cuda.Device().synchronize()
t0 = time.time()
while time.time() - t0 < 14:
    if kern is None and time.time() - t0 > 6:
        kern = cp.ElementwiseKernel("float32 x", "float32 y", src, "affine_probe")
    y = kern(x) if kern is not None else x * 1.0001
    s = float(y.sum())
'''


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    prog = out / "probe.py"
    prog.write_text(PROGRAM)
    result: dict[str, object] = {}
    for mode in ("early", "late"):
        run = out / mode
        p = subprocess.run([sys.executable, "-m", "stepscope", "record", "-o", str(run), "--force",
                            "--quiet", "--", sys.executable, str(prog), mode],
                           capture_output=True, text=True, check=False)
        entry: dict[str, object] = {"rc": p.returncode, "stderr": p.stderr[-1500:]}
        try:
            import pyarrow.compute as pc

            from stepscope.store.run import Run

            r = Run(run)
            k, a = r.table("kernels"), r.table("api_calls")
            entry["kernels_by_name"] = {str(v["values"])[:80]: int(v["counts"]) for v in
                                        pc.value_counts(k.column("name")).to_pylist()}
            entry["api_by_name"] = {str(v["values"]): int(v["counts"]) for v in
                                    pc.value_counts(a.column("name")).to_pylist()}
            rank0 = r.manifest.settings.get("ranks", {}).get("rank0", {})
            entry["window"] = rank0.get("window")
            entry["diagnostics"] = [f"{d.code}: {d.message}"[:200] for d in r.manifest.diagnostics]
        except Exception as exc:  # noqa: BLE001 - report what went wrong
            entry["error"] = f"{type(exc).__name__}: {exc}"
        result[mode] = entry
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
