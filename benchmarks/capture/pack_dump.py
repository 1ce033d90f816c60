"""Pack a CUPTI buffer dump (``STEPSCOPE_CUPTI_DUMP=DIR stepscope record …``) into one small
compressed file that the CI tests decode (tests/capture/cupti/test_recorded.py).

Runs on the GPU machine, where libcupti is: besides the raw buffers and the strings they point
to, it stores libcupti's own walk of every buffer (``cuptiActivityGetNextRecord``: the offset
and kind of each record), so that CI checks stepscope's record walk against NVIDIA's, not
against itself. Buffers are cut at a record boundary so the file stays under ``--max-bytes``.

    python benchmarks/capture/pack_dump.py DUMP_DIR OUT.npz --facts '{"program": "cupy_loop"}'
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import subprocess
from pathlib import Path

import numpy as np

from stepscope.capture.cupti.native import find_libcupti, load_libcupti


def libcupti_walk(lib: ctypes.CDLL, data: bytes) -> np.ndarray:
    """(offset, kind) of every record libcupti finds in ``data`` (copied to aligned memory)."""
    raw = ctypes.create_string_buffer(len(data) + 8)
    base = ctypes.addressof(raw)
    pad = (-base) % 8
    ctypes.memmove(base + pad, data, len(data))
    buf = ctypes.cast(base + pad, ctypes.POINTER(ctypes.c_uint8))
    nxt = lib.cuptiActivityGetNextRecord
    nxt.argtypes = [ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    rec = ctypes.c_void_p(None)
    rows = []
    while nxt(buf, len(data), ctypes.byref(rec)) == 0 and rec.value:
        off = rec.value - (base + pad)
        rows.append((off, int.from_bytes(data[off:off + 4], "little")))
    return np.array(rows, dtype=np.uint64).reshape(-1, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-bytes", type=int, default=1_500_000, help="raw buffer bytes kept in all")
    ap.add_argument("--facts", default="{}", help="JSON: what the program did (for the test)")
    args = ap.parse_args()
    meta = json.loads((args.dump / "meta.json").read_text())
    path = find_libcupti()
    if path is None:
        raise SystemExit("pack_dump: no libcupti found (install torch with CUDA or nvidia-cuda-cupti)")
    lib = load_libcupti(path)
    arrays: dict[str, np.ndarray] = {}
    left = args.max_bytes
    kept = 0
    for f in sorted(args.dump.glob("buffer-*.bin")):
        data = f.read_bytes()
        walk = libcupti_walk(lib, data)
        if not len(walk) or left <= 0:
            continue
        ends = np.append(walk[1:, 0], len(data)).astype(np.int64)
        n = int(np.searchsorted(ends, left, side="right")) or 1
        cut = int(ends[n - 1])
        arrays[f"buf_{kept:04d}"] = np.frombuffer(data[:cut], dtype=np.uint8)
        arrays[f"walk_{kept:04d}"] = walk[:n]
        kept += 1
        left -= cut
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    meta["recorded_on"] = {"gpu": smi, "python": platform.python_version(),
                           "libcupti": path}
    meta["facts"] = json.loads(args.facts)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez_compressed(args.out, **arrays)  # type: ignore[arg-type]
    print(f"{args.out}: {kept} buffers, {args.max_bytes - left} bytes, "
          f"{sum(len(v) for k, v in arrays.items() if k.startswith('walk_'))} records")


if __name__ == "__main__":
    main()
