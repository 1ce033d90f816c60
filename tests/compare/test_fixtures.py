"""``stepscope.diff`` on real before/after traces (in-repo copies of ../shared/fixtures/external),
against what the traces' own tools concluded (tests/data/PROVENANCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

import stepscope
from stepscope.compare import Diff, Verdict

DATA = Path(__file__).resolve().parents[1] / "data"
EXT, DIFF = DATA / "external", DATA / "diff"


def _gpu_share(d: Diff, side: int) -> float:
    busy = sum((c.base_ms, c.new_ms)[side] for c in d.categories
               if c.name in ("compute", "communication", "copies"))
    return busy / d.mean_ms[side]


@pytest.fixture(scope="module")
def resnet() -> Diff:
    # the planted input bottleneck (DataLoader num_workers=0) against its fix (num_workers=4)
    return stepscope.diff(
        EXT / "kineto_resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz",
        EXT / "kineto_resnet50_num_workers_4_worker0.1623212756351.pt.trace.json.gz")


def test_the_dataloader_fix_is_faster_by_the_input_wait(resnet: Diff) -> None:
    d = resnet
    assert d.verdict is Verdict.FASTER
    lo, hi = d.step.interval_pct
    assert lo < d.step.change_pct < hi < 0
    # the right category with the right sign: input wait, most of the change, gone
    top = d.categories[0]
    assert top.name == "input_wait" and top.delta_ms < -50
    assert top.new_ms < 1.0
    # kineto tb_plugin: DataLoader 33.4% of the step with 0 workers, 0.84% with 4
    assert top.base_ms / d.mean_ms[0] == pytest.approx(0.334, abs=0.05)
    assert top.new_ms / d.mean_ms[1] < 0.0084 + 0.005
    assert abs(top.delta_ms) > 0.8 * abs(d.mean_ms[1] - d.mean_ms[0])
    fs = {f.id: f for f in d.findings}
    assert fs["input_bound"].status == "gone"
    ops = {o.name: o for o in d.ops}
    loader = ops["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    assert loader.status == "gone" and loader.base_ms > 50


@pytest.fixture(scope="module")
def hta_compare() -> Diff:
    return stepscope.diff(DIFF / "hta_trace_compare_base_base.json.gz",
                          DIFF / "hta_trace_compare_test_test.json.gz")


def test_ops_added_and_removed_as_hta_says(hta_compare: Diff) -> None:
    d = hta_compare
    ops = {o.name: o for o in d.ops}
    # HTA's TraceDiff.ops_diff (tests/test_trace_diff.py, iteration 1010): added AddmmBackward0,
    # All2All_Pooled_Req, CatBackward0; deleted nccl:all_reduce; unchanged the others
    assert {o.name for o in d.ops if o.status == "new"} == {
        "AddmmBackward0", "All2All_Pooled_Req", "CatBackward0"}
    assert not [o for o in d.ops if o.status == "gone"]
    # per step over both steps: nccl:all_reduce ran in 1009 and 1010 before, only in 1009 after
    ar = ops["nccl:all_reduce"]
    assert ar.base is not None and ar.new is not None
    assert (ar.base.calls, ar.new.calls) == (1.0, 0.5)
    for name in ("aten::as_strided", "aten::empty", "cudaEventQuery", "cudaLaunchKernel"):
        o = ops[name]
        assert o.base is not None and o.new is not None and o.base.calls == o.new.calls
    # GPU: HTA counts one kernel fewer in iteration 1010: a kernel name called less often
    fewer = [k for k in d.kernels if k.base and k.new and k.new.calls < k.base.calls]
    assert len(fewer) == 1 and not [k for k in d.kernels if k.status != "matched"]
    # two steps a side: no 95% interval exists, whatever the medians say
    assert d.verdict is Verdict.INCONCLUSIVE and "2 against 2" in d.step.reason
    assert d.alignment == "rank 1"


def test_two_jobs_of_hta_trace_diff() -> None:
    d = stepscope.diff(EXT / "hta_trace_diff_control_control.json.gz",
                       EXT / "hta_trace_diff_test_test.json.gz")
    # control: rank 3 of 8 on an A100; test: rank 1 of 2 on a V100 (another job)
    assert d.alignment == "BASE rank 3 against NEW rank 1 (no rank in common)"
    assert d.verdict is Verdict.SLOWER
    # HTA temporal breakdown: GPU busy 83.8% (control) and 92.5% (test)
    assert _gpu_share(d, 0) == pytest.approx(0.838, abs=0.05)
    assert _gpu_share(d, 1) == pytest.approx(0.925, abs=0.05)
    assert d.categories[0].name == "compute" and d.categories[0].delta_ms > 30
    # the V100 runs volta_sgemm kernels the A100 trace does not have
    assert any(k.status == "new" and k.name.startswith("volta_sgemm") for k in d.kernels)


def test_a_profiler_fix_that_reorders_events_changes_nothing() -> None:
    # libkineto's fix wrote the same events in time order: same kernel, ops, breakdown
    d = stepscope.diff(DIFF / "kineto_docs_before_fix_trace.json.gz",
                       DIFF / "kineto_docs_after_fix_trace.json.gz")
    assert all(c.delta_ms == 0 for c in d.categories)
    assert [k.name for k in d.kernels] == ["Kernel"] and d.kernels[0].delta_ms == 0
    assert all(o.status == "matched" and o.delta_ms == 0 for o in d.ops) and len(d.ops) == 5
    assert all(f.status == "unchanged" for f in d.findings)
    # one step a side (the whole trace): no noise to judge a change against
    assert d.verdict is Verdict.INCONCLUSIVE and "1 against 1" in d.step.reason


def test_a_recorded_run_against_itself_is_the_same() -> None:
    run = DATA / "recorded" / "h100_healthy"  # stepscope record on an H100, 50 steps
    d = stepscope.diff(run, run)
    assert d.verdict is Verdict.SAME and d.step.n_base >= 40
    lo, hi = d.step.interval_pct
    assert -2.0 <= lo <= 0.0 <= hi <= 2.0


def test_two_ranks_of_one_job_compare_rank_by_rank(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):  # HTA's sampled traces of one job's ranks 0 and 1, as one run
        name = f"trace_filter_sampled_rank-{r}.json.gz"
        (job / name).write_bytes((DATA / name).read_bytes())
    d = stepscope.diff(job, job)
    assert d.alignment.startswith("ranks 0-1, each against itself")
    assert [r.base_rank for r in d.ranks] == [0, 1]
    assert all(c.delta_ms == 0 for c in d.categories)
