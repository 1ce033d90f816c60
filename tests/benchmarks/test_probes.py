"""benchmarks/scenarios/loader_probe.py, trace_variant.py, host_floor_probe.py and
held_host_probe.py on the CPU: what they print, and their refusals (the figures they exist
for are GPU ones: docs/accuracy.md)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))


def test_loader_probe_prints_one_line_per_configuration(capsys: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import loader_probe

    monkeypatch.setattr(sys, "argv", ["loader_probe.py", "--batches", "3", "--warmup", "1",
                                      "--workers", "0,1", "--batch-sizes", "2",
                                      "--sample-ms", "0.01"])
    assert loader_probe.main() == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    head, rows = lines[0], lines[1:]
    assert head["rounds"] >= 1 and head["sample_ms"] == 0.01
    # no CUDA here: pin_memory off only; a batch of 2 samples of 64 x 1024 fp32 is 0.5 MiB
    assert [(r["workers"], r["pin_memory"]) for r in rows] == [(0, False), (1, False)]
    for r in rows:
        assert r["batch_mib"] == 0.5 and r["batches"] == 3
        assert r["ms_between_batches"] > 0 and r["make_batch_ms_median"] > 0


def test_trace_variant_traces_a_fix_variant(tmp_path: Path, capsys: Any) -> None:
    import trace_variant

    out = tmp_path / "conv.pt.trace.json.gz"
    assert trace_variant.main(["conv_fp32", "--variant", "bf16_amp", "--device", "cpu",
                               "--out", str(out), "--warmup-steps", "1", "--active", "1"]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["variant"] == "bf16_amp" and said["path"] == str(out)
    events = json.loads(gzip.open(out).read())["traceEvents"]
    names = {e.get("name") for e in events}
    assert any(str(n).startswith("ProfilerStep#") for n in names)
    assert "aten::_to_copy" in names  # autocast's casts are in the fixed variant's trace


def test_trace_variant_refuses_what_it_cannot_trace(tmp_path: Path, capsys: Any) -> None:
    import trace_variant

    out = str(tmp_path / "t.json.gz")
    assert trace_variant.main(["conv_fp32", "--variant", "nope", "--out", out]) == 2
    assert "has no variant 'nope'" in capsys.readouterr().err
    assert trace_variant.main(["no_such", "--out", out]) == 2
    assert trace_variant.main(["cupy_pageable", "--out", out]) == 2
    assert "not a torch scenario" in capsys.readouterr().err


def test_host_floor_probe_times_each_variant_full_and_tiny(tmp_path: Path, capsys: Any) -> None:
    import host_floor_probe

    out = tmp_path / "floor.jsonl"
    assert host_floor_probe.main(["fp32_no_tf32", "--device", "cpu", "--rounds", "2",
                                  "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["variant"] for r in rows] == ["baseline", "tf32", "bf16_amp"]
    for r in rows:
        assert r["full_ms"] > 0 and r["tiny_ms"] > 0 and r["full_call_ms"] > 0
        assert len(r["full_blocks_ms"]) == len(r["tiny_blocks_ms"]) == 2
    # autocast's casts: the bf16 step casts, and its parameters' casts have a backward
    base, amp = rows[0], rows[2]
    assert amp["cpu_ops"] > base["cpu_ops"] and amp["to_copy_backward"] > 0
    assert base["to_copy_backward"] == 0
    assert "fp32_no_tf32 bf16_amp: full" in capsys.readouterr().out


def test_host_floor_probe_refuses_unknown_and_skips_non_torch(tmp_path: Path,
                                                              capsys: Any) -> None:
    import host_floor_probe

    out = str(tmp_path / "f.jsonl")
    assert host_floor_probe.main(["no_such", "--out", out]) == 2
    assert "unknown scenario 'no_such'" in capsys.readouterr().err
    assert host_floor_probe.main(["cupy_pageable", "--out", out, "--device", "cpu"]) == 3
    assert "not a torch scenario" in capsys.readouterr().err


def test_held_host_probe_refuses_without_a_gpu_and_unknown_names(tmp_path: Path,
                                                                 capsys: Any) -> None:
    import held_host_probe

    out = str(tmp_path / "held")
    assert held_host_probe.main(["no_such", "--out", out]) == 2
    assert "unknown scenario 'no_such'" in capsys.readouterr().err
    assert held_host_probe.main(["conv_fp32", "--out", out, "--device", "cpu"]) == 3
    assert "needs a CUDA device" in capsys.readouterr().err
    assert held_host_probe.main(["--compare", out]) == 2
    assert "no results" in capsys.readouterr().err


def test_held_host_probe_compares_the_models_host_with_the_held_host(tmp_path: Path,
                                                                     capsys: Any) -> None:
    """``--compare`` on a folder laid out as the GPU run writes it: the trace and the run are
    two of the repository's H100 fixtures; the held and step figures are this test's input."""
    import shutil

    import held_host_probe

    data = Path(__file__).resolve().parents[1] / "data"
    shutil.copy(data / "h100_conv_fp32.pt.trace.json.gz", tmp_path / "t.pt.trace.json.gz")
    shutil.copytree(data / "recorded" / "h100_loader_tf32", tmp_path / "r.run")
    line = {"scenario": "conv_fp32", "warm_calls": 1, "steps_per_round": 4,
            "variants": {"baseline": {"step_ms": 5.8, "held_ms": 2.0, "held_rounds": 4,
                                      "held_calls_ms": [2.0]},
                         "tf32": {"step_ms": 3.1, "held_ms": 2.1, "held_rounds": 4,
                                  "held_calls_ms": [2.1]}},
            "held_after": {"held_ms": 2.2, "held_rounds": 4, "held_calls_ms": [2.2]},
            "trace": {"path": "t.pt.trace.json.gz"}, "record": {"path": "r.run"}}
    (tmp_path / "held.jsonl").write_text(json.dumps(line) + "\n")
    assert held_host_probe.main(["--compare", str(tmp_path)]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| conv_fp32")]
    assert len(rows) == 2
    base = rows[0].split(" | ")
    assert base[1:4] == ["baseline", "5.8", "2.0"] and base[4] == "2.2"
    # the model's host-only replay of each, and its ratio to the held 2.0 ms
    est, ratio = float(base[5].split()[0]), float(base[6])
    assert est > 0 and ratio == pytest.approx(est / 2.0, abs=0.01)
    assert "118 GPU ops a step" in base[5]
    assert rows[1].split(" | ")[1:4] == ["tf32", "3.1", "2.1"]
