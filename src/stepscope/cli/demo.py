"""``stepscope demo``: import and report two small real H100 traces bundled with the package.

Works on a fresh machine with no GPU and no framework installed.
"""

from __future__ import annotations

import argparse
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError

DEMOS = (
    ("gpt_bf16_adamw", "GPT-style bf16 training step (H100, torch.profiler with stacks)"),
    ("cnn_fp32_sync", "fp32 CNN with pageable copies and .item() every step (H100)"),
)


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "demo")
    p.add_argument("-o", "--output", default="stepscope-demo",
                   help="folder for the demo runs and reports (default: ./stepscope-demo)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.output)
    created = not out.exists() and not out.is_symlink()
    try:
        return _demo(out)
    except BaseException:
        if created:  # a failed demo (a full disk, stdout gone) leaves nothing behind
            shutil.rmtree(out, ignore_errors=True)
        raise


def _demo(out: Path) -> int:
    from stepscope.importers import import_traces
    from stepscope.reporters.html import to_html
    from stepscope.reporters.json_report import to_json
    from stepscope.reporters.report import build_report
    from stepscope.reporters.terminal import console_for_stdout, print_report, render_text
    from stepscope.store.output import write_text_output
    from stepscope.store.run import Run

    if out.exists() and not out.is_dir():
        raise StepscopeError(f"{out}: exists and is not a folder (choose another -o)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StepscopeError(f"{out}: cannot create the folder ({exc.strerror})") from None
    console = console_for_stdout()
    written: list[Path] = []
    data = resources.files("stepscope") / "data"
    for name, title in DEMOS:
        with resources.as_file(data / f"{name}.pt.trace.json.gz") as trace:
            run_dir = import_traces([trace], out / f"{name}.stepscope", overwrite=True)
        run_ = Run(run_dir)
        report = build_report(run_, page=True)
        console.rule(f"[bold]{title}")
        print_report(report, console)
        json_path = out / f"{name}.report.json"
        txt_path = out / f"{name}.report.txt"
        html_path = out / f"{name}.report.html"
        write_text_output(json_path, to_json(report))
        write_text_output(txt_path, render_text(report))
        write_text_output(html_path, to_html(report))
        written += [run_dir, html_path, json_path, txt_path]
    console.rule("[bold]demo files")
    for p in written:
        console.print(f"  {p}", highlight=False)
    console.print("Open the .report.html files in a browser (one self-contained file each).",
                  highlight=False)
    console.print("Next: stepscope report RUN, stepscope query RUN \"SELECT ...\"", highlight=False)
    return 0
