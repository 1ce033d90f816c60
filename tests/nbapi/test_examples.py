"""The framework examples of docs/python-api.md (Lightning, Hugging Face Trainer, Keras on
the torch backend) run as written, on CPU, each in its own process: every one writes a trace
and a stepscope run of the profiler's five active steps, and prints the findings block. A
framework that is not installed (``pip install 'stepscope[examples]'``) skips its test."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import stepscope

ROOT = Path(__file__).parent.parent.parent
DOC = ROOT / "docs" / "python-api.md"
NEEDS = {"lightning": ("lightning", "torch"), "transformers": ("transformers", "accelerate", "torch"),
         "keras": ("keras", "torch")}


def examples() -> dict[str, str]:
    blocks = re.findall(r"```python\n(# example: (\w+)\n.*?)```", DOC.read_text(), re.S)
    return {name: code for code, name in blocks}


def test_the_docs_have_the_three_examples() -> None:
    assert sorted(examples()) == sorted(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_example_runs_and_hands_off(name: str, tmp_path: Path) -> None:
    for module in NEEDS[name]:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'stepscope[examples]')")
    script = tmp_path / f"{name}_example.py"
    script.write_text(examples()[name])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
               [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1", "KERAS_BACKEND": "torch", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "CUDA_VISIBLE_DEVICES": ""}
    env.pop("RANK", None)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted((tmp_path / "runs" / name).glob("*.stepscope"))
    traces = sorted((tmp_path / "runs" / name).glob("*.pt.trace.json"))
    assert len(runs) == len(traces) == 1
    assert stepscope.load(runs[0]).steps().num_rows == 5  # the schedule's active steps
    rel = runs[0].relative_to(tmp_path)
    assert f"stepscope: {rel}: 5 steps" in done.stdout
    assert f"full report: stepscope report {rel}" in done.stdout
