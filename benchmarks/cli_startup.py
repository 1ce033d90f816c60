"""Start-up time of the command line: ``stepscope --help``, ``CMD --help`` and ``--version``.

Each run is a fresh process, timed from spawn to exit (wall clock; stdout to /dev/null), run two
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


def one_run(cmd: list[str], pythonpath: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE_"))}
    env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return time.perf_counter() - t0


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
        times: dict[tuple[str, str, str, str], list[float]] = {}
        for name, src in variants:  # compile once: warm means cached bytecode
            one_run([a.python, "-m", "stepscope", "--help"], str(src))
        for _ in range(a.repeats):
            for args in ARGS:
                for way, cmd in ways.items():
                    for mode in modes:
                        for name, src in variants:
                            path = (fresh_copy(src, Path(tmp) / "cold") if mode == "cold"
                                    else str(src))
                            key = (" ".join(args), way, mode, name)
                            times.setdefault(key, []).append(one_run([*cmd, *args], path))
    print(f"{a.repeats} runs each; ms: median (quartiles)\n")
    names = [n for n, _ in variants]
    print("| command | how | bytecode | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for args in ARGS:
        for way in ways:
            for mode in modes:
                cells = []
                for name in names:
                    xs = times[(" ".join(args), way, mode, name)]
                    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
                    cells.append(f"{q[1] * 1e3:.0f} ({q[0] * 1e3:.0f}-{q[2] * 1e3:.0f})")
                print(f"| `{' '.join(args)}` | {way} | {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
