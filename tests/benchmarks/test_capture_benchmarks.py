"""benchmarks/capture: the pieces of the capture-overhead benchmark that run without a GPU (the
GPU run costs device time; a crash there is found here first): issue 17's RNN-cell and conv-net
steps, mixed.py's per-block environment knobs and its rounds over several workloads."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
for p in (BENCH, BENCH / "capture"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

torch = pytest.importorskip("torch")

import mixed
from workloads import conv_step, rnn_step


def test_the_rnn_cell_and_the_conv_net_train_on_the_cpu() -> None:
    step = rnn_step(seq=3, batch=4, hidden=8)
    step()
    step()
    fn, batch = conv_step(target_ms=0.0, batch=1)
    assert batch == 1
    fn()


def test_a_knobbed_configuration_sets_its_environment_for_its_block_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, str | None]]] = []

    def block(config: str, step: Any, steps: int, run: Path) -> tuple[float, list[float]]:
        seen.append((config, {k: os.environ.get(k) for k in mixed.BEFORE_2026_11_26}))
        return 1.0, []

    monkeypatch.setattr(mixed, "captured_block", block)
    monkeypatch.setenv("STEPSCOPE_CUPTI_PREPARED_BUFFERS", "2")  # the user's own: kept after
    monkeypatch.delenv("STEPSCOPE_CUPTI_NESTED_DRIVER", raising=False)
    monkeypatch.delenv("STEPSCOPE_CUPTI_ZEROED_BUFFERS", raising=False)
    mixed.knobbed_block("stepscope-bare-before", lambda: None, 1, tmp_path)
    mixed.knobbed_block("stepscope", lambda: None, 1, tmp_path)
    assert seen[0] == ("stepscope-bare", mixed.BEFORE_2026_11_26)
    assert seen[1] == ("stepscope", {"STEPSCOPE_CUPTI_NESTED_DRIVER": None,
                                     "STEPSCOPE_CUPTI_ZEROED_BUFFERS": None,
                                     "STEPSCOPE_CUPTI_PREPARED_BUFFERS": "2"})
    assert "STEPSCOPE_CUPTI_NESTED_DRIVER" not in os.environ


def test_rounds_alternate_captured_and_plain_blocks_per_workload(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def block(config: str, step: Any, steps: int, run: Path) -> tuple[float, list[float]]:
        assert config == "stepscope"  # stepscope-nested: the same, with its knob set
        return (3.0 if os.environ.get("STEPSCOPE_CUPTI_NESTED_DRIVER") == "1" else 2.0), []

    monkeypatch.delenv("STEPSCOPE_CUPTI_NESTED_DRIVER", raising=False)
    monkeypatch.setattr(mixed, "captured_block", block)
    monkeypatch.setattr(mixed, "settle", lambda: None)
    monkeypatch.setattr(mixed, "time_steps", lambda step, n: (1.0, []))
    args = argparse.Namespace(rounds=3, window_s=0.0, configs=["stepscope", "stepscope-nested"])
    out = mixed.run_workload("launch", lambda: None, 0, args, tmp_path, mixed.Instructions(), 0.0)
    kinds = [b["kind"] for b in out["blocks"]]
    assert kinds[:5] == ["plain", "stepscope", "plain", "stepscope-nested", "plain"]
    assert kinds[5] == "stepscope-nested"  # each round starts one configuration later
    s = out["summary"]
    assert s["stepscope"]["median_ratio"] == 2.0 and s["stepscope"]["pairs"] == 3
    assert s["stepscope-nested"]["median_ratio"] == 3.0 and out["rounds"] == 3
    assert out["blocks"][1]["gpu"] is None  # no run folder: nothing read
