"""The profile's tables on a synthetic run with hand-computed answers, and on a real trace."""

from __future__ import annotations

import importlib
import shutil
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import stepscope
from builder import TraceBuilder
from stepscope.errors import StepscopeError
from stepscope.notebook import Profile, note, verdict
from stepscope.notebook.tables import COPIES, FINDINGS, KERNELS, STEPS, SYNCS

DATA = Path(__file__).parent.parent / "data"


def _synthetic(path: Path, *, kernel_us: float = 60.0) -> Profile:
    """Six steps of 100 µs: a 16-block kernel of ``kernel_us`` at +10 µs launched at +2 µs,
    a pageable 1 MiB HtoD copy of 10 µs at +75 µs; the rest of each step is GPU idle."""
    b = TraceBuilder()
    for i in range(6):
        t = i * 100
        b.step(t, 100)
        b.kernel("gemm<b>", ts=t + 10, dur=kernel_us, grid=(16, 1, 1), block=(128, 1, 1),
                 launch=(t + 2, 5))
        b.memcpy("HtoD", t + 75, 10, 1 << 20, src="pageable")
    b.build(path)
    return stepscope.load(path)


def test_tables_of_a_synthetic_run(tmp_path: Path) -> None:
    p = _synthetic(tmp_path / "run")
    assert isinstance(p, Profile) and p.path == tmp_path / "run" and p.ranks == (0,)
    steps = p.steps()
    assert steps.schema.equals(STEPS, check_metadata=False) and steps.num_rows == 6
    for s in steps.to_pylist():
        assert s["wall_ms"] == pytest.approx(0.1)
        assert s["compute_ms"] == pytest.approx(0.06) and s["copies_ms"] == pytest.approx(0.01)
        # the GPU idle: no op rows, so none of it is left unattributed (analysis.breakdown)
        assert s["idle_ms"] == 0.0
        assert s["launch_ms"] + s["host_ms"] == pytest.approx(0.03)
    bd = {r["category"]: (r["ms"], r["pct"]) for r in p.breakdown().to_pylist()}
    assert bd["compute"] == pytest.approx((0.06, 60.0))
    assert bd["copies"] == pytest.approx((0.01, 10.0))
    assert bd["host"][0] + bd["launch"][0] == pytest.approx(0.03)
    assert sum(ms for ms, _ in bd.values()) == pytest.approx(0.1)
    k = p.kernels().to_pylist()
    assert [(r["name"], r["calls"], r["grid"]) for r in k] == [("gemm<b>", 6, [16, 1, 1])]
    assert k[0]["total_ms"] == pytest.approx(0.36) and k[0]["mean_ms"] == pytest.approx(0.06)
    c = {r["direction"]: r for r in p.copies().to_pylist()}
    assert (c["HtoD"]["count"], c["HtoD"]["bytes"], c["HtoD"]["pageable_count"]) == (
        6, 6 << 20, 6)
    assert c["HtoD"]["ms"] == pytest.approx(0.06) and c["DtoH"]["count"] == 0
    assert p.syncs().num_rows == 0 and p.syncs().schema.equals(SYNCS, check_metadata=False)
    f = p.findings()
    assert f.schema.equals(FINDINGS, check_metadata=False)
    assert "small_grid" in f.column("id").to_pylist()
    assert f.column("est_saving_ms").to_pylist() == sorted(
        f.column("est_saving_ms").to_pylist(), reverse=True)  # ranked


def test_empty_tables_keep_their_columns_and_say_why(tmp_path: Path) -> None:
    p = _synthetic(tmp_path / "run")
    coll = p.collectives()
    assert coll.num_rows == 0 and "one rank" in note(coll) and "busbw_gbs" in coll.column_names
    assert note(p.remedies()) and p.remedies().schema.names[:2] == ["rank", "id"]
    assert note(p.kernels()) and p.kernels().schema.equals(KERNELS, check_metadata=False)


def test_remedies_and_plan_come_from_the_report_when_it_has_them(tmp_path: Path) -> None:
    from stepscope.notebook import tables

    option = {"name": "pinned", "title": "pin the batch", "predicted_step_ms": 0.09,
              "est_saving_ms": 0.01, "assumptions": ["PCIe gen4"]}
    d = {"remedies": [{"id": "pin_memory", "title": "pin", "rank": 0,
                       "finding_ids": ["pageable_memcpy"], "predicted_step_ms": 0.09,
                       "est_saving_ms": 0.01, "est_saving_pct": 10.0, "option": "pinned",
                       "options": [option], "evidence": ["6 copies"], "assumptions": []}],
         "plan": {"rank": 0, "measured_ms": 0.1, "predicted_step_ms": 0.09,
                  "est_saving_ms": 0.01, "est_saving_pct": 10.0,
                  "remedy_ids": ["pin_memory"], "options": ["pinned"]}}
    (r,) = tables.remedies(d).to_pylist()
    assert (r["id"], r["finding_ids"], r["options"][0]["assumptions"]) == (
        "pin_memory", ["pageable_memcpy"], ["PCIe gen4"])
    assert "alone" in note(tables.remedies(d))
    (pl,) = tables.plan(d).to_pylist()
    assert pl["remedy_ids"] == ["pin_memory"] and pl["predicted_step_ms"] == 0.09
    assert tables.remedies({"remedies": []}).num_rows == 0
    assert "no remedy" in note(tables.remedies({"remedies": []}))
    assert "no plan" in note(tables.plan({"plan": None}))
    # the plan's subsets, a row each (an older report's plan has none: empty, with a note)
    assert tables.plan_subsets(d).num_rows == 0 and "older" in note(tables.plan_subsets(d))
    d["plan"]["subsets"] = [{"remedy_ids": ["pin_memory", "tf32"], "options": ["pinned", "tf32"],
                             "predicted_step_ms": 0.05, "est_saving_ms": 0.05,
                             "est_saving_pct": 50.0}]
    (sub,) = tables.plan_subsets(d).to_pylist()
    assert sub["remedy_ids"] == ["pin_memory", "tf32"] and sub["predicted_step_ms"] == 0.05
    assert "no plan" in note(tables.plan_subsets({"plan": None}))
    # this run: what its JSON report holds, or an empty table saying the version has none
    p = _synthetic(tmp_path / "run")
    doc = p._json()
    if "remedies" in doc:
        assert p.remedies().column("id").to_pylist() == [x["id"] for x in doc["remedies"]]
        subs = (doc.get("plan") or {}).get("subsets") or []
        assert p.plan_subsets().num_rows == len(subs)
    else:
        assert p.remedies().num_rows == 0 and "predicts none" in note(p.remedies())
        assert p.plan().num_rows == 0 and p.plan_subsets().num_rows == 0


def test_diff_between_two_profiles(tmp_path: Path) -> None:
    base = _synthetic(tmp_path / "base", kernel_us=60)
    new = _synthetic(tmp_path / "new", kernel_us=30)
    d = base.diff(new)
    rows = {(r["kind"], r["name"]): r for r in d.to_pylist()}
    comp = rows[("category", "compute")]
    assert comp["base_ms"] == pytest.approx(0.06) and comp["new_ms"] == pytest.approx(0.03)
    assert comp["delta_ms"] == pytest.approx(-0.03) and comp["change_pct"] == pytest.approx(-50)
    gpu_idle = sum(rows[("category", c)]["delta_ms"] for c in ("idle", "launch", "host"))
    assert gpu_idle == pytest.approx(0.03)  # the same step: what compute lost went idle
    k = rows[("kernel", "gemm<b>")]
    assert k["delta_ms"] == pytest.approx(-0.03) and k["status"] == "name"
    assert d.to_pylist()[0]["kind"] == "step"
    assert verdict(d) in ("faster", "slower", "same", "inconclusive")
    assert base.compare(str(new.path)).categories == base.compare(new).categories
    assert verdict(base.diff(base)) in ("same", "inconclusive")


def test_data_frames_are_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _synthetic(tmp_path / "run")
    assert isinstance(p.kernels(to="arrow"), pa.Table)
    real = importlib.import_module

    def missing(name: str, *a: Any) -> Any:
        if name in ("pandas", "polars"):
            raise ModuleNotFoundError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(StepscopeError, match=r"pip install 'stepscope\[pandas\]'"):
        p.kernels(to="pandas")
    with pytest.raises(StepscopeError, match=r"stepscope\[polars\]"):
        p.findings(to="polars")
    fake = types.SimpleNamespace(from_arrow=lambda t: ("polars frame", t.num_rows))
    monkeypatch.setattr(importlib, "import_module",
                        lambda name, *a: fake if name == "polars" else real(name, *a))
    assert p.kernels(to="polars") == ("polars frame", 1)
    with pytest.raises(StepscopeError, match="unknown table kind"):
        p.steps(to="excel")


def test_a_real_trace(tmp_path: Path) -> None:
    trace = tmp_path / "cnn.pt.trace.json.gz"
    shutil.copy(DATA / "cnn_fp32_sync.pt.trace.json.gz", trace)
    p = stepscope.load(trace)
    steps = p.steps()
    cats = [c for c in steps.column_names if c.endswith("_ms") and c not in (
        "wall_ms", "marker_wall_ms", "gpu_busy_ms")]
    for s in steps.to_pylist():  # the breakdown sums to the step, every step
        assert sum(s[c] for c in cats) == pytest.approx(s["wall_ms"], rel=1e-6)
    rep = p.analyze()
    assert p.kernels().num_rows == len(rep.analysis.ranks[0].kernels)
    assert p.findings().column("id").to_pylist() == [f.id for f in rep.advice.findings]
    syncs = p.syncs()
    assert syncs.num_rows > 0
    assert sum(syncs.column("count").to_pylist()) == rep.analysis.ranks[0].syncs.count
    assert p.copies().schema.equals(COPIES, check_metadata=False)
    assert p.report().startswith(stepscope.report(rep)[:40])
    assert p.report("json") == stepscope.report(rep, "json")
    assert p.report("html").startswith("<!DOCTYPE html>")
    with pytest.raises(StepscopeError, match="unknown report format"):
        p.report("pdf")


def test_collectives_of_a_straggler_run(builder: Any, tmp_path: Path) -> None:
    from tests.model.test_collectives import straggler

    straggler(builder)  # rank 1 computes 0.4 ms longer; one 1 MiB all_reduce of 0.1 ms a step
    builder.build(tmp_path / "run")
    p = stepscope.load(tmp_path / "run")
    (g,) = p.collectives().to_pylist()
    assert (g["op"], g["bytes"], g["ranks"]) == ("all_reduce", 1 << 20, 2)
    assert g["transfer_ms"] == pytest.approx(0.1) and g["wait_ms"] == pytest.approx(0.2)
    assert note(p.collectives()) and "one rank" not in note(p.collectives())
    assert set(p.breakdown().column("rank").to_pylist()) == {0, 1}
