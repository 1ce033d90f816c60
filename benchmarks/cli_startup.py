"""Start-up time of the command line: ``stepscope --help``, ``CMD --help`` and ``--version``.

Each run is a fresh process, timed from spawn to exit: wall clock, and the CPU time of the child
(user + sys, ``os.wait4``: less disturbed than the wall clock on a shared machine); stdout to
/dev/null. The interpreter alone (``python -c pass``) is measured alongside: the floor. Run two
ways: ``python -m stepscope ARGS`` and the console script (``stepscope ARGS``: pip's wrapper,
written to a temporary file for the interpreter given). ``warm``: the package's bytecode cached
(the usual case); ``cold``: every run imports a fresh copy of the package without its
``__pycache__`` (as the first run after an install that did not compile it; the standard library's
bytecode stays cached). Variants (``NAME=SRC``, a checkout's ``src`` folder) run interleaved, so a
machine whose speed drifts affects them alike. Prints the median and the quartiles of each cell,
in ms, as a Markdown table. Standard library only.

    python benchmarks/cli_startup.py --repeats 20 --variant before=/path/to/old/src \\
        --variant after=src
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = (("--version",), ("--help",), ("report", "--help"), ("record", "--help"),
        ("import", "--help"), ("query", "--help"))
WRAPPER = """import sys
from stepscope.cli.main import run
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(run())
"""


def one_run(cmd: list[str], pythonpath: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``cmd``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE_"))}
    env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit status {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def fresh_copy(src: Path, into: Path) -> str:
    """``src``'s stepscope package copied into ``into`` without bytecode; its PYTHONPATH."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(src / "stepscope", into / "stepscope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return str(into)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--modes", default="warm,cold")
    a = ap.parse_args()
    variants = [(v.partition("=")[0], Path(v.partition("=")[2] or "src").resolve())
                for v in a.variant] or [("this", Path("src").resolve())]
    modes = a.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="stepscope-startup-") as tmp:
        wrapper = Path(tmp) / "stepscope"
        wrapper.write_text(WRAPPER)
        ways = {"python -m stepscope": [a.python, "-m", "stepscope"],
                "stepscope (console script)": [a.python, str(wrapper)]}
        times: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
        for name, src in variants:  # compile once: warm means cached bytecode
            one_run([a.python, "-m", "stepscope", "--help"], str(src))
        for _ in range(a.repeats):
            floor = one_run([a.python, "-c", "pass"], "")
            times.setdefault(("", "python -c pass", "-", ""), []).append(floor)
            for args in ARGS:
                for way, cmd in ways.items():
                    for mode in modes:
                        for name, src in variants:
                            path = (fresh_copy(src, Path(tmp) / "cold") if mode == "cold"
                                    else str(src))
                            key = (" ".join(args), way, mode, name)
                            times.setdefault(key, []).append(one_run([*cmd, *args], path))
    print(f"{a.repeats} runs each; ms: median (quartiles), wall clock / CPU\n")
    names = [n for n, _ in variants]
    print("| command | how | bytecode | " + " | ".join(f"{n} wall | {n} CPU" for n in names)
          + " |")
    print("|---|---|---|" + "---|---|" * len(names))
    floor = times[("", "python -c pass", "-", "")]
    print("| (interpreter alone) | python -c pass | - | "
          + " | ".join(f"{_cell([w for w, _ in floor])} | {_cell([c for _, c in floor])}"
                       for _ in names) + " |")
    for args in ARGS:
        for way in ways:
            for mode in modes:
                cells = []
                for name in names:
                    xs = times[(" ".join(args), way, mode, name)]
                    cells += [_cell([w for w, _ in xs]), _cell([c for _, c in xs])]
                print(f"| `{' '.join(args)}` | {way} | {mode} | " + " | ".join(cells) + " |")


def _cell(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{q[1] * 1e3:.0f} ({q[0] * 1e3:.0f}-{q[2] * 1e3:.0f})"


if __name__ == "__main__":
    main()
