"""The commands' names, one-line summaries, descriptions and examples: what ``--help`` shows.

Standard library only, and nothing of the commands themselves: ``stepscope --help`` lists the
commands from this table without importing a command's module (each pulls in its own layers),
and each command's ``add_parser`` makes its parser with :func:`add_verb`, so the two say the same.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any, NamedTuple

# the run's tables (schema.TABLE_NAMES, which imports pyarrow; a test keeps the two the same)
QUERY_TABLES = ("devices", "processes", "threads", "streams", "kernels", "memcpy", "memset",
                "api_calls", "sync", "annotations", "cpu_ops", "steps", "collectives",
                "input_waits", "samples", "stacks", "memory_events", "kernel_metrics",
                "kernel_metric_values", "kernel_source_lines")


class Verb(NamedTuple):
    """A command (a NamedTuple, not a frozen dataclass: ``dataclasses`` imports ``inspect``,
    ~5 ms of every start)."""

    name: str  # the command as typed
    module: str  # its module in stepscope.cli (``import`` is a keyword: import_)
    summary: str  # one line, in ``stepscope --help``'s list
    description: str  # the paragraph under ``stepscope NAME --help``'s usage line
    examples: tuple[str, ...]  # command lines, each with a ``# what it does`` comment


VERBS: tuple[Verb, ...] = (
    Verb("record", "record",
         "run a Python training program and capture a run (no code change)",
         "Runs the program with the capture injected into every Python process it starts "
         "(torchrun and multiprocessing included), then merges what they captured into one run "
         "folder and prints its summary on stderr. The exit status is the program's.",
         ("stepscope record -- python train.py --epochs 1      # capture the default window",
          "stepscope record -o myrun --steps 10-20 -- train.py  # steps 10 to 20 into ./myrun",
          "stepscope record --live -- python train.py  # a panel of the run while it runs",
          "stepscope record -- torchrun --nproc-per-node 8 train.py  # every rank")),
    Verb("import", "import_",
         "import traces (PyTorch profiler, TensorFlow/JAX, Nsight Systems, Nsight Compute)",
         "Reads PyTorch profiler (Kineto) traces (.json / .json.gz: files, or folders with one "
         "file per rank, a TensorBoard log folder as it is), TensorFlow/JAX XSpace profiles "
         "(.xplane.pb), Nsight Systems exports (.sqlite[.gz], a Parquet folder) and Nsight "
         "Compute profiles, and writes one run folder.",
         ("stepscope import trace.json.gz                # -> trace.stepscope",
          "stepscope import logdir/ -o myrun             # a folder of rank files",
          "stepscope import report.sqlite.gz -o myrun    # an Nsight Systems export",
          "stepscope import k.ncu-rep --into myrun       # add Nsight Compute counters")),
    Verb("kernels", "kernels",
         "profile the run's costliest kernels with Nsight Compute and add their counters",
         "Re-runs the program under Nsight Compute (ncu), profiling the kernels that cost the "
         "run the most time per step, and adds their counters to the run (the kernel rules and "
         "the report's kernel section then speak about them).",
         ("stepscope kernels myrun -- python train.py            # the top 5 kernels",
          "stepscope kernels --top 3 --rank 1 myrun -- python train.py")),
    Verb("report", "report",
         "summarise a run: terminal, text, JSON, HTML or Markdown",
         "Analyses the run: steps and step time, GPU busy, the per-step breakdown, the top "
         "kernels and the findings ranked by estimated saving. The format comes from --format, "
         "else from the suffix of -o, else the terminal; HTML without -o goes to RUN/report.html.",
         ("stepscope report myrun                        # the terminal summary",
          "stepscope report myrun -o report.html --open  # the HTML report, opened",
          "stepscope report myrun --format json          # stepscope.report/1 on stdout",
          "stepscope report myrun --format markdown >> $GITHUB_STEP_SUMMARY",
          "stepscope report myrun --untraced-step-ms 24.0  # remedies from your log's step")),
    Verb("query", "query",
         "run SQL over a run's tables (DuckDB)",
         "Each table of the run is a view of its name over the run's Parquet files (read as "
         "the query needs them, not loaded first). Needs DuckDB: pip install 'stepscope[query]'. "
         "Tables: " + ", ".join(QUERY_TABLES) + ".",
         ("stepscope query myrun \"SELECT count(*) FROM kernels\"",
          "stepscope query myrun \"SELECT name, sum(dur_ns) AS t FROM kernels GROUP BY 1 "
          "ORDER BY 2 DESC\" --limit 10",
          "stepscope query myrun \"SELECT * FROM steps\" --format csv > steps.csv")),
    Verb("export", "export",
         "write the run as a trace-event timeline (Perfetto UI, chrome://tracing)",
         "Chrome trace-event JSON: host threads, GPU streams, steps, launch flows and counters, "
         "per rank. Gzip when FILE ends in .gz.",
         ("stepscope export myrun                      # -> myrun.trace.json.gz beside it",
          "stepscope export myrun -o timeline.json     # uncompressed")),
    Verb("demo", "demo",
         "import and report the bundled H100 demo traces (no GPU needed)",
         "Imports two small real H100 traces bundled with the package and writes their run "
         "folders and their text, JSON and HTML reports into one folder.",
         ("stepscope demo                  # into ./stepscope-demo",
          "stepscope demo -o /tmp/demo")),
    Verb("diff", "diff",
         "compare two runs: faster, slower or the same, and why",
         "NEW against BASE: run folders or traces (imported for the comparison), one or several "
         "per side (their steady steps pooled). Exit status 1 with --fail-above PCT when NEW is "
         "slower by more than PCT percent with the test's confidence (a CI gate).",
         ("stepscope diff base.stepscope new.stepscope",
          "stepscope diff --base a1 a2 --new b1 b2 --fail-above 5   # a CI gate",
          "stepscope diff base new -o diff.html")),
    Verb("completion", "completion",
         "print a shell completion script (bash, zsh or fish)",
         "Prints a completion script for the shell, made from stepscope's own options. "
         "Load it from the shell's start-up file (docs/commands.md).",
         ("source <(stepscope completion bash)                   # bash, this shell",
          "stepscope completion zsh > ~/.zfunc/_stepscope        # zsh, with fpath+=~/.zfunc",
          "stepscope completion fish > ~/.config/fish/completions/stepscope.fish")),
)

BY_NAME = {v.name: v for v in VERBS}


WIDTH = 88  # the description's lines (the examples are kept as written)


def epilog(verb: Verb) -> str:
    return examples_text(verb.examples)


def examples_text(lines: tuple[str, ...]) -> str:
    """``examples:`` and the command lines, their ``# comments`` in one column."""
    split = [(cmd.rstrip(), note) for cmd, _, note in (line.partition("  # ") for line in lines)]
    width = max(len(cmd) for cmd, note in split if note) if any(n for _, n in split) else 0
    return "examples:\n" + "\n".join(
        f"  {cmd.ljust(width)}  # {note}" if note else f"  {cmd}" for cmd, note in split)


def add_verb(sub: Any, name: str, **extra: Any) -> argparse.ArgumentParser:
    """The parser of command ``name`` in the subparsers ``sub``: its summary, description and
    examples from :data:`VERBS`; ``extra`` goes to ``add_parser`` (e.g. ``usage``; a
    ``description`` given there replaces the table's)."""
    verb = BY_NAME[name]
    extra["description"] = textwrap.fill(extra.get("description", verb.description), WIDTH)
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=verb.summary, epilog=epilog(verb),
        formatter_class=argparse.RawDescriptionHelpFormatter, **extra)
    return p
