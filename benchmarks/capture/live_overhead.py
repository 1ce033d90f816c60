"""What ``stepscope record --live`` costs the profiled program: step time of the same program run
plain, under ``stepscope record`` and under ``stepscope record --live``, side by side.

The live view reads the staging chunks in the recorder's process (``capture.live_feed``), so the
program's step time should be the same with and without ``--live``; this measures it. Three
configurations, each a fresh ``python`` process, in rotating order round by round:

  plain         the program alone
  record        ``stepscope record --steps 20-1000000 -- PROGRAM`` (default backend: CUPTI
                through the C shim; host samplers; stacks)
  record-live   the same with ``--live``, run on a pseudo-terminal made here, so that the panel
                (redrawn every second) and the relay of the program's output run as on a
                user's terminal; what it draws is read and thrown away
  record-pty    (``--with-pty``) ``record`` without ``--live`` on such a pseudo-terminal: the
                program's output to a terminal, no live view (separates the two)
  record-lines  (``--with-lines``) ``--live`` with stderr not a terminal: a line every 30 s

The program (this file with ``--program``): the GPT-style step of ``benchmarks/overhead.py``
(bf16, AdamW: step boundaries from the optimizer hook; batch fixed by ``--gpt-batch`` so every
process runs the same step), 30 warm-up steps, then blocks of ``--block`` steps for ``--seconds``
seconds, the device synchronised at block edges only; it writes its block means (ms per step).
Per configuration: the median over its processes of each process's median block mean; ratios
of those medians, and the per-round ratio ``record-live / record`` (the headline: adjacent runs
share the machine's drift), median, min and max.

    python benchmarks/capture/live_overhead.py --out live_overhead.json [--rounds 3]
        [--seconds 12] [--block 20] [--gpt-batch 8] [--with-pty] [--with-lines]
        [--configs C...] [--workload sleep]

About 60-70 s a round on an H100 (torch import, the merge of each recorded run); the default
3 rounds fit in 300 s.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
CONFIGS = ("plain", "record", "record-live")


def program(args: argparse.Namespace) -> None:
    if args.workload == "sleep":  # no GPU: checks the driver itself (steps of 20 ms, marked)
        step, sync = _sleep_step(), (lambda: None)
    else:
        sys.path.insert(0, str(HERE.parents[1]))
        from overhead import make_workload, sync

        step, _ = make_workload("gpt", batch=args.gpt_batch)
    for _ in range(30):
        step()
    sync()
    blocks: list[float] = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(args.block):
            step()
        sync()
        blocks.append((time.perf_counter() - t0) / args.block * 1e3)
        print(f"block {len(blocks)}: {blocks[-1]:.2f} ms/step", flush=True)  # output to relay
    Path(args.result).write_text(json.dumps({"block_ms": blocks}))


def _sleep_step() -> Any:
    try:
        from stepscope import step as mark
    except ImportError:
        def mark() -> None:
            pass

    def step() -> None:
        time.sleep(0.02)
        mark()

    return step


def run_config(config: str, args: argparse.Namespace, tmp: Path, n: int) -> dict[str, Any]:
    result = tmp / f"{config}-{n}.json"
    prog = [sys.executable, str(HERE), "--program", "--result", str(result), "--seconds",
            str(args.seconds), "--block", str(args.block), "--gpt-batch", str(args.gpt_batch),
            "--workload", args.workload]
    if config == "plain":
        cmd = prog
    else:
        cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(tmp / f"run-{config}-{n}"),
               "--steps", "20-1000000", *(["--live"] if config == "record-live" else []), "--",
               *prog]
    t0 = time.perf_counter()
    if config in ("record-live", "record-pty"):
        code = _on_pty(cmd, panel=config == "record-live")
    else:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=600)
        code = p.returncode
        if code:
            print(p.stderr[-2000:], file=sys.stderr)
    wall = time.perf_counter() - t0
    if code != 0 or not result.is_file():
        raise SystemExit(f"{config}: exit status {code}")
    blocks = json.loads(result.read_text())["block_ms"]
    return {"config": config, "round": n, "blocks": len(blocks),
            "median_block_ms": statistics.median(blocks), "wall_s": round(wall, 2)}


def read_pty(master: int, take: Callable[[bytes], object]) -> None:
    """Read a pseudo-terminal's master until the other side closes, each chunk to ``take``."""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            return
        if not data:
            return
        take(data)


def _on_pty(cmd: list[str], panel: bool) -> int:
    """Run ``cmd`` with stdout and stderr on a new pseudo-terminal (a panel is drawn); read and
    drop what it draws."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    got = bytearray()
    t = threading.Thread(target=read_pty, args=(master, lambda data: got.extend(data[-4096:])),
                         daemon=True)
    t.start()
    code = p.wait(timeout=600)
    t.join(timeout=5)
    os.close(master)
    if panel and b"stepscope record --live" not in got:
        print("record-live: no panel seen on the pty", file=sys.stderr)
    return code


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    med = {c: statistics.median(r["median_block_ms"] for r in rows if r["config"] == c)
           for c in {r["config"] for r in rows}}
    out: dict[str, Any] = {"median_ms": med}
    for a, b in (("record", "plain"), ("record-live", "plain"), ("record-live", "record"),
                 ("record-lines", "record"), ("record-pty", "record"),
                 ("record-live", "record-pty")):
        if a in med and b in med:
            out[f"{a}/{b}"] = round(med[a] / med[b], 4)
    for a, b in (("record-live", "record"), ("record-live", "record-pty"),
                 ("record-pty", "record")):
        paired = []
        for n in sorted({r["round"] for r in rows}):
            by = {r["config"]: r["median_block_ms"] for r in rows if r["round"] == n}
            if a in by and b in by:
                paired.append(by[a] / by[b])
        if paired:
            out[f"paired {a}/{b}"] = {"median": round(statistics.median(paired), 4),
                                      "min": round(min(paired), 4),
                                      "max": round(max(paired), 4), "n": len(paired)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="live_overhead.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--with-lines", action="store_true")
    ap.add_argument("--with-pty", action="store_true")
    ap.add_argument("--configs", nargs="+", choices=(*CONFIGS, "record-pty", "record-lines"),
                    help="these configurations instead (in this order, rotated each round)")
    ap.add_argument("--workload", choices=("gpt", "sleep"), default="gpt",
                    help="sleep: 20 ms sleeps marked with stepscope.step(), to check this script "
                         "without a GPU")
    args = ap.parse_args()
    if args.program:
        program(args)
        return
    configs = args.configs or [*CONFIGS, *(["record-pty"] if args.with_pty else []),
                               *(["record-lines"] if args.with_lines else [])]
    rows = []
    with tempfile.TemporaryDirectory(prefix="live_overhead-") as d:
        for n in range(args.rounds):
            order = configs[n % len(configs):] + configs[:n % len(configs)]
            for config in order:
                rows.append(_lines(args, Path(d), n) if config == "record-lines"
                            else run_config(config, args, Path(d), n))
                print(json.dumps(rows[-1]), flush=True)
                Path(args.out).write_text(json.dumps({"rows": rows, "summary": summarise(rows)},
                                                     indent=1))  # kept if the run is cut short
    summary = summarise(rows)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    print(json.dumps(summary, indent=1))


def _lines(args: argparse.Namespace, tmp: Path, n: int) -> dict[str, Any]:
    """``--live`` with stderr a pipe (the line mode)."""
    result = tmp / f"lines-{n}.json"
    cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(tmp / f"run-lines-{n}"),
           "--steps", "20-1000000", "--live", "--", sys.executable, str(HERE), "--program",
           "--result", str(result), "--seconds", str(args.seconds), "--block", str(args.block),
           "--gpt-batch", str(args.gpt_batch), "--workload", args.workload]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode or not result.is_file():
        raise SystemExit(f"record-lines: exit status {p.returncode}: {p.stderr[-500:]}")
    blocks = json.loads(result.read_text())["block_ms"]
    return {"config": "record-lines", "round": n, "blocks": len(blocks),
            "median_block_ms": statistics.median(blocks)}


if __name__ == "__main__":
    main()
