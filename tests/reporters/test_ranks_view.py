"""The ranks view: per-rank table, collectives and the step x rank wait heat map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.model.test_collectives import straggler

from stepscope.analysis import analyze
from stepscope.reporters.json_report import to_json
from stepscope.reporters.ranks_view import ranks_view
from stepscope.reporters.report import build_report
from stepscope.reporters.terminal import render_text


def test_view_of_a_straggler_run(builder: Any, tmp_path: Path) -> None:
    straggler(builder)
    run = builder.build(tmp_path / "run")
    v = ranks_view(analyze(run))
    r0, r1 = v.rows
    assert (r0.rank, r1.rank) == (0, 1)
    assert r0.wait_ms == pytest.approx(0.4) and r1.wait_ms == 0.0
    assert r1.late_calls == r1.calls and r0.late_calls == 0
    assert r0.step_ms == pytest.approx(1.0) and r1.compute_ms == pytest.approx(0.4)
    (g,) = v.groups
    assert (g.op, g.bytes, g.ranks, g.transfer_ms) == ("all_reduce", 1 << 20, 2, 0.1)
    assert g.wait_ms == pytest.approx(0.2)  # mean over the two ranks of (0.4, 0)
    assert v.matched == g.calls and v.matched_by == "step"
    assert all(row == pytest.approx((0.4, 0.0)) for row in v.wait_ms)
    assert set(v.late) == {1} and len(v.steps) == len(v.wait_ms)

    text = render_text(build_report(run))
    assert "Ranks (mean of steady steps, ms)" in text
    assert "Collectives (" in text and "all_reduce" in text
    assert "Rank 1 is the straggler" in text
    doc = json.loads(to_json(build_report(run)))
    c = doc["collectives"]
    assert c["heat"]["ranks"] == [0, 1] and c["groups"][0]["op"] == "all_reduce"
    assert c["ranks"][0]["wait_ms"] == pytest.approx(0.4)


def test_one_rank_has_no_ranks_view(builder: Any, tmp_path: Path) -> None:
    for i in range(4):
        builder.step(i * 1000, 1000, step=i)
        builder.kernel("gemm", i * 1000, 500)
    run = builder.build(tmp_path / "run")
    assert "Ranks (" not in render_text(build_report(run))
    assert json.loads(to_json(build_report(run)))["collectives"] is None
