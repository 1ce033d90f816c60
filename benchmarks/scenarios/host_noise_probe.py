#!/usr/bin/env python3
"""How steady is the host that the planted programs run on? Between processes, between cores,
and over time.

    PYTHONPATH=src:/tmp/site python3 benchmarks/scenarios/host_noise_probe.py --out DIR
        [--programs torch_inference,explicit_sync] [--runs 6] [--seconds 4] [--pin 2-5]

1. The host: CPU model, NUMA nodes, frequency governor and current clocks, load average, and
   ``/proc/stat``'s steal time (a virtual machine's CPU taken by its host).
2. Each core's speed: a fixed pure-Python loop in a process pinned to that core
   (``--core-rounds`` times), with the core's steal % over it; and one core over time
   (``--series-seconds``): a short loop every ~0.22 s.
3. Each program (``program.py NAME``, untraced, ``--seconds`` each) ``--runs`` times unpinned and
   ``--runs`` times pinned to ``--pin`` (``os.sched_setaffinity`` in the child), alternating;
   per run its steady ms/step, the ``/proc/stat`` shares over it (user, system, steal, idle of
   the whole machine) and the cores it ran on (``/proc/PID/stat`` sampled every 50 ms).

Writes DIR/host_noise.json and prints one line per measurement. The spread of one program's
ms/step over processes, pinned and not, is what bounds any comparison of a prediction made in
one process with a measurement made in another.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import record_report as rr  # after the sys.path setup

LOOP = "import time;t=time.perf_counter();s=0\nfor i in range(3_000_000): s+=i\n" \
       "print(time.perf_counter()-t)"


def read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def stat_totals(cpu: int | None = None) -> list[int]:
    """/proc/stat's line for the machine (or one ``cpu``): user nice system idle iowait irq
    softirq steal (jiffies)."""
    tag = "cpu" if cpu is None else f"cpu{cpu}"
    for line in read("/proc/stat").splitlines():
        parts = line.split()
        if parts and parts[0] == tag:
            return [int(x) for x in parts[1:9]]
    return []


def shares(a: list[int], b: list[int]) -> dict[str, float]:
    if not a or not b:
        return {}
    d = [y - x for x, y in zip(a, b, strict=True)]
    total = sum(d) or 1
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: round(100.0 * v / total, 2) for n, v in zip(names, d, strict=True)}


def host_facts() -> dict[str, Any]:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:  # no lscpu here
        lscpu = ""
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
            "NUMA node", "Hypervisor vendor", "Virtualization type", "CPU max MHz")
    cpus = sorted(os.sched_getaffinity(0))
    freq = {c: read(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq").strip()
            for c in cpus}
    return {"lscpu": [ln for ln in lscpu.splitlines() if ln.startswith(keep)],
            "cpus": cpus, "nproc": len(cpus),
            "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip(),
            "cur_freq_khz": freq, "loadavg": read("/proc/loadavg").strip()}


def core_speeds(cpus: list[int], rounds: int) -> dict[int, list[list[float]]]:
    """Per core, per round: [the loop's seconds, that core's steal % over it]."""
    out: dict[int, list[list[float]]] = {c: [] for c in cpus}
    for _ in range(rounds):
        for c in cpus:
            before = stat_totals(c)
            p = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True,
                               preexec_fn=lambda c=c: os.sched_setaffinity(0, {c}))
            steal = shares(before, stat_totals(c)).get("steal", float("nan"))
            out[c].append([round(float(p.stdout.strip() or "nan"), 4), steal])
    return out


def core_series(cpu: int, seconds: float) -> list[list[float]]:
    """One core over time: every ~0.22 s, a loop of ~1/10 of LOOP's in this process pinned to
    ``cpu``: [time since start, the loop's seconds, the core's steal % since the last one]."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    out: list[list[float]] = []
    t_start = time.perf_counter()
    before = stat_totals(cpu)
    while time.perf_counter() - t_start < seconds:
        t = time.perf_counter()
        s = 0
        for i in range(300_000):
            s += i
        took = time.perf_counter() - t
        time.sleep(0.2)
        after = stat_totals(cpu)
        out.append([round(t - t_start, 2), round(took, 5),
                    shares(before, after).get("steal", float("nan"))])
        before = after
    os.sched_setaffinity(0, allowed)
    return out


def cores_of(pid: int) -> set[int]:
    fields = read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return {int(fields[36])} if len(fields) > 36 else set()


def one_run(name: str, seconds: float, pin: set[int] | None, log: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "program.py"), name, "--seconds", f"{seconds:g}",
           "--warmup-steps", "20"]
    before = stat_totals()
    t0 = time.perf_counter()
    with open(log, "wb") as fo:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=subprocess.STDOUT,
                                preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        seen: set[int] = set()
        while proc.poll() is None:
            seen |= cores_of(proc.pid)
            time.sleep(0.05)
    return {"pinned": bool(pin), "rc": proc.returncode, "ms": rr.program_steady_ms(log),
            "wall_s": round(time.perf_counter() - t0, 2), "stat_pct": shares(before, stat_totals()),
            "cores_seen": sorted(seen)}


def spread(ms: list[float]) -> dict[str, float]:
    if not ms:
        return {}
    med = statistics.median(ms)
    return {"median": round(med, 4), "min": round(min(ms), 4), "max": round(max(ms), 4),
            "max_over_min": round(max(ms) / min(ms), 3)}


def parse_pin(text: str) -> set[int]:
    lo, _, hi = text.partition("-")
    return set(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--programs", default="torch_inference,explicit_sync")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--pin", default="2-5")
    ap.add_argument("--core-rounds", type=int, default=2)
    ap.add_argument("--series-cpu", type=int, default=2)
    ap.add_argument("--series-seconds", type=float, default=0.0)
    ap.add_argument("--logs", type=Path, default=None,
                    help="where the programs' logs go (default OUT/logs)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.logs or args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    facts = host_facts()
    print(json.dumps(facts), flush=True)
    speeds = core_speeds(facts["cpus"], args.core_rounds)
    print("core loop [s, steal %]:", json.dumps(speeds), flush=True)
    series = core_series(args.series_cpu, args.series_seconds) if args.series_seconds else []
    if series:
        took = [x[1] for x in series]
        print(f"cpu {args.series_cpu} over {args.series_seconds:g} s: loop s min {min(took):.4f}"
              f" median {statistics.median(took):.4f} max {max(took):.4f}; steal % max "
              f"{max(x[2] for x in series):.1f}; series {json.dumps(series)}", flush=True)
    res: dict[str, Any] = {"host": facts, "core_loop_s_steal": speeds, "series": series,
                           "programs": {}}
    pin = parse_pin(args.pin)
    for name in [p for p in args.programs.split(",") if p]:
        runs = []
        for i in range(2 * args.runs):
            r = one_run(name, args.seconds, pin if i % 2 else None,
                        logs / f"{name}.{i}.log")
            print(name, json.dumps(r), flush=True)
            runs.append(r)
        res["programs"][name] = {
            "runs": runs,
            "unpinned": spread([r["ms"] for r in runs if not r["pinned"] and r["ms"]]),
            "pinned": spread([r["ms"] for r in runs if r["pinned"] and r["ms"]])}
        print(name, "unpinned", res["programs"][name]["unpinned"], "pinned",
              res["programs"][name]["pinned"], flush=True)
    res["host_after"] = {"loadavg": read("/proc/loadavg").strip()}
    (args.out / "host_noise.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
