"""Where ``stepscope record --live``'s extra step time comes from (issue 24): its parts switched
on and off, in one process and across processes.

``live_overhead.py`` measured ``record --live`` 2-3% slower than ``record`` (paired per round,
H100), more than the recorder's own work (under 1% of a core) explains. The program's capture is
configured the same with and without ``--live`` (tests/cli/test_live_ablation.py checks it), so
what differs is in the recorder: its threads (the panel's refresh: reading the staging chunks,
rendering, writing the panel to the terminal; the relay of the program's output) and, from the
start, the program's stdout/stderr being pseudo-terminals that the recorder relays. Two parts:

**A. Toggled (one process).** One ``record --live`` on a pseudo-terminal (as on a user's
terminal) whose live view is switched, every ``--phase-s`` seconds, between modes, in a shuffled
order each cycle: ``off`` (the relay only; the panel stays as last drawn), ``poll`` (the chunks
read each second, nothing drawn), ``render`` (the panel drawn each second from the last figures,
nothing read), ``full`` (``--live`` as it is) and ``burn`` (nothing but a recorder thread that
spins on a core: a positive control of what the recorder's CPU use can do to the program).
The program stamps every step's end (``time.monotonic``, the same clock in every process), so
each step falls into a phase; per cycle, each mode's median step time over the ``off`` phase's of
the same cycle. Program-to-program and minute-to-minute drift cancel: a part costing 0.5% shows.

**B. Across processes.** Fresh processes in rotating order: ``record`` (output to /dev/null),
``record-pty`` (``record`` on a pseudo-terminal, no live view), ``record-live-off`` (``--live``
on a pseudo-terminal, its ptys and relay only: the panel never refreshed) and ``record-live``;
optionally ``plain``. Median step time of each run; paired per round against ``record``. What
toggling cannot switch (the ptys, the recorder's threads existing) shows here.

The program: ``benchmarks/overhead.py``'s GPT step (bf16, AdamW, the loss read every step: a
device sync per step, so each step's time is its own), ``--gpt-batch`` fixed, 30 warm-up steps,
then ``--seconds`` of steps; a line to stdout every ``--print-every`` steps (20: output for the
relay). The
recorders are ended once the program has exited: the merge is skipped (it comes after the
program, so it changes nothing measured here) to fit more runs into a device call.

    python benchmarks/capture/live_ablate.py --out live_ablate.json [--toggle-seconds 45]
        [--phase-s 1.5] [--seconds 6] [--rounds 2] [--configs C...] [--workload sleep]

About 60 s for part A and 18-20 s a run for part B on an H100 (torch import, CUDA start): the
defaults fit in ~220 s. The JSON is rewritten after every run (a cut-short call keeps what ran).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from live_overhead import read_pty

HERE = Path(__file__).resolve()
MODES = ("off", "poll", "render", "full", "burn")
CONFIGS = ("record", "record-pty", "record-live-off", "record-live")
GUARD_S = 0.15  # steps starting this soon after a switch are not counted


# -- the profiled program ------------------------------------------------------------------------
def program(args: argparse.Namespace) -> None:
    about: dict[str, Any] = {}
    if args.workload == "sleep":  # no GPU: 20 ms sleeps marked as steps (checks this script)
        try:
            from stepscope import step as mark
        except ImportError:  # plain, outside a recording
            def mark() -> None:
                pass

        def step() -> None:
            time.sleep(0.02)
            mark()
    else:
        sys.path.insert(0, str(HERE.parents[1]))
        from overhead import make_workload

        step, _ = make_workload("gpt", batch=args.gpt_batch)
        import torch

        about = {"torch": torch.__version__, "cuda": torch.version.cuda,
                 "device": torch.cuda.get_device_name()}
    for _ in range(30):
        step()
    ends = [time.monotonic()]
    stop = ends[0] + args.seconds
    while ends[-1] < stop:
        step()  # the GPT step reads its loss: a device sync, so the step is done here
        ends.append(time.monotonic())
        if len(ends) % args.print_every == 0:
            print(f"step {len(ends)}: {(ends[-1] - ends[-2]) * 1e3:.2f} ms", flush=True)
    Path(args.result).write_text(json.dumps({"pid": os.getpid(), "ends": ends, **about}))


# -- the recorder of part A: ``stepscope record`` with a toggled live view -------------------------
def recorder(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``stepscope record ARGV`` whose live view follows the phases (or stays ``--mode``)."""
    from stepscope.cli import live
    from stepscope.cli.main import main

    log: list[dict[str, Any]] = []
    out = Path(args.phases_out) if args.phases_out else None
    names: dict[int, str] = {}  # native thread id -> what it runs
    ended: dict[int, float] = {}  # native thread id -> its CPU seconds, once it has ended

    class Toggled(live.LiveView):
        mode = args.mode or "off"

        def started(self) -> None:
            super().started()
            if not args.mode:
                self._spawn(self._phases)

        def _spawn(self, target: Any) -> None:
            def named() -> None:
                tid = threading.get_native_id()
                names[tid] = getattr(target, "__name__", "?")
                try:
                    target()
                finally:  # a thread that ends before the program (the relay) says its own
                    ended[tid] = time.thread_time()

            super()._spawn(named)

        def __exit__(self, *exc: object) -> None:
            if args.threads_out:  # the program has ended: the recorder's CPU by thread so far
                names[threading.get_native_id()] = "main"
                tmp = Path(args.threads_out + ".tmp")  # whole when it appears
                tmp.write_text(json.dumps(
                    {name: _thread_cpu_s(tid, ended) for tid, name in names.items()}))
                os.replace(tmp, args.threads_out)
            super().__exit__(*exc)

        def refresh(self) -> None:
            if self.mode == "full":
                super().refresh()
            elif self.mode == "poll":
                self.poll()
            elif self.mode == "render":
                self.redraw()

        def _phases(self) -> None:
            rng = random.Random(args.seed)
            cycle = 0
            while not self._stop.is_set():
                order = list(args.modes)
                rng.shuffle(order)
                for mode in order:
                    t0 = time.monotonic()
                    chunks = self.snapshot.chunks
                    self.mode = mode
                    if mode == "burn":
                        _spin_until(t0 + args.phase_s, self._stop)
                    else:
                        self._stop.wait(args.phase_s)
                    log.append({"cycle": cycle, "mode": mode, "t0": t0, "t1": time.monotonic(),
                                "chunks_read": self.snapshot.chunks - chunks})
                    if out is not None:
                        out.write_text(json.dumps(log))
                    if self._stop.is_set():
                        return
                cycle += 1

    live.LiveView = Toggled  # type: ignore[misc]  # record's _launch imports it at call time
    return main(list(argv))


def _thread_cpu_s(tid: int, ended: dict[int, float]) -> float | None:
    """A thread's CPU seconds: from /proc while it runs, else what it said as it ended."""
    cpu = _cpu_s(os.getpid(), tid)
    got = ended.get(tid) if cpu is None else cpu  # ended: read after /proc (it may end between)
    return None if got is None else round(got, 3)


def _spin_until(t: float, stop: threading.Event) -> None:
    x = 0
    while time.monotonic() < t and not stop.is_set():
        for i in range(2000):
            x += i


# -- running a configuration --------------------------------------------------------------------
def run_config(config: str, args: argparse.Namespace, tmp: Path, tag: str,
               toggle: bool = False) -> dict[str, Any]:
    result = tmp / f"{tag}.json"
    seconds = args.toggle_seconds if toggle else args.seconds
    prog = [sys.executable, str(HERE), "--program", "--result", str(result), "--seconds",
            str(seconds), "--gpt-batch", str(args.gpt_batch), "--workload", args.workload,
            "--print-every", str(args.print_every)]
    record = ["record", "-o", str(tmp / f"run-{tag}"), "--steps", "20-1000000"]
    if config == "plain":
        cmd = prog
    elif config in ("record", "record-pty"):
        cmd = [sys.executable, "-m", "stepscope", *record, "--", *prog]
    else:
        extra = (["--phases-out", str(tmp / f"{tag}-phases.json"), "--phase-s",
                  str(args.phase_s), "--seed", str(args.seed), "--modes", *args.modes] if toggle
                 else ["--mode", "full" if config == "record-live" else "off"])
        cmd = [sys.executable, str(HERE), "--recorder", *extra, "--threads-out",
               str(tmp / f"{tag}-threads.json"), "--", *record, "--live", "--", *prog]
    t0 = time.perf_counter()
    on_pty = config not in ("plain", "record")
    threads = tmp / f"{tag}-threads.json"
    code, seen, cpu = _run(cmd, result, on_pty, threads if "--threads-out" in cmd else None)
    seen, _, total = seen.rpartition("\0")
    wall = time.perf_counter() - t0
    if not result.is_file():
        raise SystemExit(f"{config}: no result (exit status {code})\n{seen[-2000:]}")
    data = json.loads(result.read_text())
    ends = data["ends"]
    durs = [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]
    row: dict[str, Any] = {"config": config, "steps": len(durs),
                           "median_ms": round(statistics.median(durs), 4),
                           "mean_ms": round(statistics.fmean(durs), 4), "wall_s": round(wall, 2),
                           "recorder_cpu_s": None if config == "plain" or cpu is None
                           else round(cpu, 3),
                           **{k: data[k] for k in ("torch", "cuda", "device") if k in data}}
    if on_pty:  # what the recorder wrote to its terminal: the panel and the program's lines
        row["terminal_bytes"] = int(total)
        row["terminal_tail"] = _plain(seen[-1200:])
    if config.startswith("record-live") and "stepscope record --live" not in seen:
        row["note"] = "no panel seen"
    if threads.is_file():
        row["recorder_threads_cpu_s"] = json.loads(threads.read_text())
    if toggle:
        phases = json.loads((tmp / f"{tag}-phases.json").read_text())
        row["toggle"] = toggled(ends, phases)
        row["phases"] = len(phases)
        row["per_phase"] = per_phase(ends, phases)
    return row


def _run(cmd: list[str], result: Path, on_pty: bool, threads: Path | None = None
         ) -> tuple[int | None, str, float | None]:
    """Run ``cmd`` (on a new pseudo-terminal, or with its output to /dev/null); once the program
    has written its result and exited, end the recorder (no merge). Returns (status, its last
    output, the recorder's CPU seconds until then)."""
    seen = bytearray()
    total = [0]
    master = None
    if on_pty:
        master, slave = pty.openpty()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)

        def take(data: bytes) -> None:
            total[0] += len(data)
            seen.extend(data)
            del seen[:-8192]

        threading.Thread(target=read_pty, args=(master, take), daemon=True).start()
    else:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    code = None
    while time.monotonic() < deadline:
        code = p.poll()
        if code is not None:
            break
        if _program_done(result):  # and the toggled recorder has written its threads' CPU
            wait = time.monotonic() + 30
            while threads is not None and not threads.is_file() and time.monotonic() < wait:
                time.sleep(0.05)
            break
        time.sleep(0.2)
    cpu = _cpu_s(p.pid)  # the recorder's own CPU time, up to the program's end
    if code is None:
        try:
            p.send_signal(signal.SIGKILL)  # the recorder only: the merge is not measured
        except ProcessLookupError:
            pass
        code = p.wait()
    if master is not None:
        time.sleep(0.1)
        os.close(master)
    return code, seen.decode(errors="replace") + f"\0{total[0]}", cpu


def _plain(text: str) -> str:
    """``text`` without terminal escape sequences."""
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", text)


def _cpu_s(pid: int, tid: int | None = None) -> float | None:
    """User + system CPU seconds of process ``pid`` itself (not its children), or of its
    thread ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _program_done(result: Path) -> bool:
    """The program wrote its result and its process is gone."""
    try:
        pid = json.loads(result.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    return not Path(f"/proc/{pid}").exists() or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# -- analysis -------------------------------------------------------------------------------------
def toggled(ends: Sequence[float], phases: Sequence[dict[str, Any]],
            guard_s: float = GUARD_S) -> dict[str, Any]:
    """Each step (from one end stamp to the next) in the phase holding it whole (starting at
    least ``guard_s`` after the switch); per cycle, each mode's median step time over that
    cycle's ``off`` median; per mode, the median, min and max of those ratios over the cycles,
    and its pooled median step time."""
    by: dict[tuple[int, str], list[float]] = {}
    j = 0
    ph = sorted(phases, key=lambda p: p["t0"])
    for a, b in zip(ends, ends[1:]):
        while j < len(ph) and ph[j]["t1"] < b:
            j += 1
        if j == len(ph):
            break
        p = ph[j]
        if a >= p["t0"] + guard_s and b <= p["t1"]:
            by.setdefault((p["cycle"], p["mode"]), []).append((b - a) * 1e3)
    med = {k: statistics.median(v) for k, v in by.items()}
    mean = {k: statistics.fmean(v) for k, v in by.items()}
    cycles = sorted({c for c, _ in med})
    out: dict[str, Any] = {"cycles": len(cycles)}
    for mode in sorted({m for _, m in med}):
        pooled = [d for (c, m), v in by.items() if m == mode for d in v]
        entry: dict[str, Any] = {"steps": len(pooled),
                                 "median_ms": round(statistics.median(pooled), 4)}
        if mode != "off":
            ratios = [med[c, mode] / med[c, "off"] for c in cycles
                      if (c, mode) in med and (c, "off") in med]
            if ratios:
                entry["vs_off"] = _spread(ratios)
                entry["mean_vs_off"] = _spread([mean[c, mode] / mean[c, "off"] for c in cycles
                                                if (c, mode) in mean and (c, "off") in mean])
        out[mode] = entry
    return out


def per_phase(ends: Sequence[float], phases: Sequence[dict[str, Any]],
              guard_s: float = GUARD_S) -> list[dict[str, Any]]:
    """Every phase: its mode, cycle, chunks read, steps counted and their median and mean (ms)."""
    out = []
    for p in sorted(phases, key=lambda p: p["t0"]):
        d = [(b - a) * 1e3 for a, b in zip(ends, ends[1:])
             if a >= p["t0"] + guard_s and b <= p["t1"]]
        out.append({"cycle": p["cycle"], "mode": p["mode"],
                    "chunks_read": p.get("chunks_read"), "steps": len(d),
                    "median_ms": round(statistics.median(d), 3) if d else None,
                    "mean_ms": round(statistics.fmean(d), 3) if d else None})
    return out


def _spread(xs: Sequence[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4), "n": len(xs)}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Part B: per configuration the median of its runs' median step times; per round, each
    configuration over ``record`` (median, min, max over the rounds)."""
    across = [r for r in rows if "round" in r]
    out: dict[str, Any] = {"median_ms": {c: round(statistics.median(
        r["median_ms"] for r in across if r["config"] == c), 4)
        for c in sorted({r["config"] for r in across})}}
    for c in sorted({r["config"] for r in across} - {"record"}):
        ratios = []
        for n in sorted({r["round"] for r in across}):
            by = {r["config"]: r["median_ms"] for r in across if r["round"] == n}
            if c in by and "record" in by:
                ratios.append(by[c] / by["record"])
        if ratios:
            out[f"paired {c}/record"] = _spread(ratios)
    toggle = [r for r in rows if "toggle" in r]
    if toggle:
        out["toggled"] = {m: {"median": v["vs_off"], "mean": v.get("mean_vs_off")}
                          for m, v in toggle[0]["toggle"].items()
                          if isinstance(v, dict) and "vs_off" in v}
    return out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                            "loadavg": os.getloadavg()}
    try:
        got = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        info["gpu"] = got.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--recorder", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--phases-out", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--threads-out", help=argparse.SUPPRESS)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                    help="part A's modes (off is needed: every mode is compared with it)")
    ap.add_argument("--out", default="live_ablate.json")
    ap.add_argument("--toggle-seconds", type=float, default=45.0,
                    help="part A's length (0: no part A)")
    ap.add_argument("--phase-s", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=6.0, help="part B's runs' length")
    ap.add_argument("--rounds", type=int, default=2, help="part B's rounds (0: no part B)")
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--print-every", type=int, default=20,
                    help="the program prints a line every N steps (output for the relay)")
    ap.add_argument("--configs", nargs="+", choices=(*CONFIGS, "plain"), default=list(CONFIGS))
    ap.add_argument("--workload", choices=("gpt", "sleep"), default="gpt")
    args, rest = ap.parse_known_args()
    if args.program:
        program(args)
        return
    if args.recorder:
        sys.exit(recorder(args, rest[1:] if rest[:1] == ["--"] else rest))
    rows: list[dict[str, Any]] = []
    info = machine()

    def save() -> None:
        Path(args.out).write_text(json.dumps({"machine": info, "rows": rows,
                                              "summary": summarise(rows)}, indent=1))

    with tempfile.TemporaryDirectory(prefix="live_ablate-") as d:
        tmp = Path(d)
        if args.toggle_seconds > 0:
            rows.append(run_config("record-live", args, tmp, "toggle", toggle=True))
            print(json.dumps(rows[-1]), flush=True)
            save()
        configs = list(args.configs)
        for n in range(args.rounds):
            for config in configs[n % len(configs):] + configs[:n % len(configs)]:
                rows.append({**run_config(config, args, tmp, f"{config}-{n}"), "round": n})
                print(json.dumps(rows[-1]), flush=True)
                save()
    save()
    print(json.dumps(summarise(rows), indent=1))


if __name__ == "__main__":
    main()
