"""The plan restricted to subsets of its remedies (advisor/plan_subsets.py): which subsets, and
each one replay of its remedies together on hand-made step models (not a sum)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.model.test_stepmodel import model

from stepscope.advisor import remedies as rem
from stepscope.advisor.plan_subsets import MAX_SUBSETS, PlanSubset, best_pair, choose
from stepscope.model.stepmodel import edits, replay
from stepscope.model.stepmodel.catalog import Candidate, Option
from stepscope.model.stepmodel.steps import HostKind, StepModel, SyncRole
from stepscope.reporters.remedies_view import pair_text, remedies_json, remedy_lines

L, K, IN = HostKind.LAUNCH, HostKind.BLOCK, HostKind.INPUT
ALT = (("tf32", "bf16_amp"),)
US = 1_000  # ns: kernels are never shorter than 2 us (edits.scale_ops)


def test_every_pair_but_alternatives_then_the_plan_less_one() -> None:
    ids = ["bf16_amp", "cuda_graphs", "tf32", "pinned_copies", "remove_syncs"]
    plan = ["bf16_amp", "cuda_graphs", "pinned_copies", "remove_syncs"]
    got = [tuple(ids[i] for i in s) for s in choose(ids, plan, ALT)]
    pairs = [s for s in got if len(s) == 2]
    assert len(pairs) == 10 - 1  # C(5, 2) less bf16_amp + tf32
    assert ("bf16_amp", "tf32") not in pairs and ("cuda_graphs", "tf32") in pairs
    # then the plan's remedies three at a time (the plan less one), the plan itself never
    assert got[len(pairs):] == [("bf16_amp", "cuda_graphs", "pinned_copies"),
                                ("bf16_amp", "cuda_graphs", "remove_syncs"),
                                ("bf16_amp", "pinned_copies", "remove_syncs"),
                                ("cuda_graphs", "pinned_copies", "remove_syncs")]
    # a plan of two: its pair is the plan, nothing else to replay
    assert choose(["a", "b"], ["a", "b"]) == []
    assert choose(["a"], ["a"]) == []


def test_the_cap_keeps_every_pair_of_the_pool() -> None:
    ids = [f"r{i}" for i in range(10)]
    got = choose(ids, ids, max_subsets=MAX_SUBSETS)
    pairs = [s for s in got if len(s) == 2]
    assert len(pairs) == 28  # the 8 largest savings only (r8, r9 left out), every pair
    assert all(max(s) < 8 for s in got)
    assert len(got) == MAX_SUBSETS and len(got[-1]) == 3
    assert choose(ids, ids, max_subsets=5) == pairs  # pairs are never cut


def _candidate(rid: str, edit: Any) -> Candidate:
    return Candidate(rid, rid, (), (), (Option(rid, rid, edit),))


def _advise(m: StepModel, cands: list[Candidate]) -> rem.Plan | None:
    """The advisor's own path: each candidate judged alone, then the plan and its subsets
    (the measured step is the replayed one: savings are the replay's)."""
    base = replay(m).step_ns
    meas = base / 1e6
    out = [rem._judge(c, m, base, meas, meas, 0) for c in cands]
    out.sort(key=lambda x: (-x[0].est_saving_ms, x[0].id))
    return rem._plan(out, m, base, meas, meas, 0, options={c.id: c.options for c in cands})


def _saving_ns(p: rem.Plan, s: PlanSubset) -> float:
    return (p.baseline_ms - s.predicted_step_ms) * 1e6


def test_a_pair_acting_on_the_same_time_saves_less_than_the_sum() -> None:
    # host work 500 us, then a launch (100 us) of a 1 ms kernel, then a sync: the host and
    # the GPU take turns, 1.5 ms a step
    m = model([(0, L, 500 * US, 100 * US), (0, K, 0, 0)], [(1, 0, 1000 * US, 0)],
              wait={2: -1}, role={2: SyncRole.EXPLICIT})
    assert replay(m).step_ns == pytest.approx(1500 * US)
    sync = m.host.role == SyncRole.EXPLICIT
    cands = [_candidate("remove_syncs", lambda x: edits.unblock(x, sync, 0)),
             _candidate("tf32", lambda x: edits.scale_ops(x, np.array([0.5])))]
    # alone: no sync -> GPU-bound at 1000 us (saves 500); half the kernel -> 500 + 500 (saves
    # 500); together the host (600 us a step) is the limit: 900 saved, not 1000
    extra = _candidate("larger_batch", lambda x: edits.scale_ops(x, np.array([0.9])))
    p = _advise(m, [*cands, extra])
    assert p is not None and set(p.remedy_ids) == {"remove_syncs", "tf32", "larger_batch"}
    sub = {frozenset(s.remedy_ids): s for s in p.subsets}
    pair = sub[frozenset({"remove_syncs", "tf32"})]
    assert _saving_ns(p, pair) == pytest.approx(900 * US, abs=100)
    assert pair.est_saving_pct == pytest.approx(60.0)
    assert best_pair(p.subsets) == pair


def test_a_pair_acting_on_time_spent_in_turn_saves_the_sum() -> None:
    # an input wait of 1 ms, then the launch of a 1 ms kernel and a sync on it: 2 ms a step
    m = model([(0, IN, 0, 1000 * US), (0, L, 0, 0), (0, K, 0, 0)], [(2, 0, 1000 * US, 0)],
              wait={3: -1}, role={3: SyncRole.EXPLICIT})
    assert replay(m).step_ns == pytest.approx(2000 * US)
    loader = _candidate("dataloader_workers", lambda x: edits.shorten_input(x, 0.0))
    tf32 = _candidate("tf32", lambda x: edits.scale_ops(x, np.array([0.5])))
    syncs = _candidate("remove_syncs", lambda x: edits.unblock(
        x, x.host.role == SyncRole.EXPLICIT, 0))
    p = _advise(m, [loader, tf32, syncs])
    assert p is not None and len(p.remedy_ids) == 3
    sub = {frozenset(s.remedy_ids): s for s in p.subsets}
    # alone: 1000 and 500 us saved; together 1500, the sum: the fast kernel is left
    pair = sub[frozenset({"dataloader_workers", "tf32"})]
    assert _saving_ns(p, pair) == pytest.approx(1500 * US, abs=100)
    assert pair.predicted_step_ms == pytest.approx(0.5, abs=1e-4)
    # every pair of the three is there, and no subset is the plan itself
    assert set(sub) == {frozenset(x) for x in (("dataloader_workers", "tf32"),
                                               ("dataloader_workers", "remove_syncs"),
                                               ("tf32", "remove_syncs"))}


def test_tf32_pairs_even_where_the_plan_takes_bf16() -> None:
    # a 400 us input wait, then a 1 ms kernel and a sync on it: 1.4 ms; bf16 (x0.25: 650 us)
    # beats TF32 (x0.5: 900 us) in the plan, with the loader (1 ms)
    m = model([(0, IN, 0, 400 * US), (0, L, 0, 0), (0, K, 0, 0)], [(2, 0, 1000 * US, 0)],
              wait={3: -1}, role={3: SyncRole.EXPLICIT})
    cands = [_candidate("tf32", lambda x: edits.scale_ops(x, np.array([0.5]))),
             _candidate("bf16_amp", lambda x: edits.scale_ops(x, np.array([0.25]))),
             _candidate("dataloader_workers", lambda x: edits.shorten_input(x, 0.0))]
    p = _advise(m, cands)
    assert p is not None and p.remedy_ids == ("bf16_amp", "dataloader_workers")
    # the plan's pair is the plan; TF32 with the loader is the one subset: 500 us
    (only,) = p.subsets
    assert only.remedy_ids == ("tf32", "dataloader_workers")
    assert only.predicted_step_ms == pytest.approx(0.5, abs=1e-4)


def test_a_remedy_hidden_behind_the_input_wait_joins_the_plan() -> None:
    # the loader thread's wait: the main thread waits 2 ms for input, then launches a 1 ms
    # kernel and goes on without a sync: the GPU runs under the next wait, 2 ms a step. TF32
    # (x0.5) saves nothing alone; with the loader's wait gone (x0.1: 200 us) the kernel is the
    # limit, and TF32 takes 1 ms to 500 us: both in the plan, and their pair is the plan
    m = model([(0, IN, 0, 2000 * US), (0, L, 0, 10 * US)], [(2, 0, 1000 * US, 0)])
    assert replay(m).step_ns == pytest.approx(2010 * US)
    loader = _candidate("dataloader_workers", lambda x: edits.shorten_input(x, 0.1))
    tf32 = _candidate("tf32", lambda x: edits.scale_ops(x, np.array([0.5])))
    base = replay(m).step_ns
    alone = rem._judge(tf32, m, base, base / 1e6, base / 1e6, 0)[0]
    assert alone.est_saving_pct < rem.MIN_SAVING_PCT
    p = _advise(m, [loader, tf32])
    assert p is not None and p.remedy_ids == ("dataloader_workers", "tf32")
    assert p.predicted_step_ms == pytest.approx(0.5, rel=0.01)
    # without TF32 the loader alone leaves the 1 ms kernel
    solo = _advise(m, [loader])
    assert solo is not None and solo.predicted_step_ms == pytest.approx(1.0, rel=0.01)


def test_the_plan_takes_each_remedys_option_with_the_others() -> None:
    # as above; the loader x2 leaves 990 us of the wait (+ the 10 us launch: 1 ms a step), x8
    # none: alone both leave the 1 ms kernel as the limit and tie, x2 first. With TF32 (500 us)
    # x2 leaves the wait as the limit (1 ms) and x8 does not (500 us): the plan takes x8, and
    # so does the subset of the two
    m = model([(0, IN, 0, 2000 * US), (0, L, 0, 10 * US)], [(2, 0, 1000 * US, 0)])
    loader = Candidate("dataloader_workers", "loader", (), (), (
        Option("x2", "x2", lambda x: edits.shorten_input(x, 0.495)),
        Option("x8", "x8", lambda x: edits.shorten_input(x, 0.0))))
    tf32 = _candidate("tf32", lambda x: edits.scale_ops(x, np.array([0.5])))
    sync = _candidate("remove_syncs", lambda x: x)  # a third remedy: the plan has subsets
    base = replay(m).step_ns
    judged = rem._judge(loader, m, base, base / 1e6, base / 1e6, 0)[0]
    assert judged.option == "x2" and [o.predicted_step_ms for o in judged.options] == \
        pytest.approx([1.0, 1.0], rel=0.01)
    p = _advise(m, [loader, tf32, sync])
    assert p is not None and p.remedy_ids == ("dataloader_workers", "tf32")
    assert p.options == ("x8", "tf32") and p.predicted_step_ms == pytest.approx(0.5, rel=0.01)
    plain = rem._plan([rem._judge(c, m, base, base / 1e6, base / 1e6, 0) for c in
                       (loader, tf32)], m, base, base / 1e6, base / 1e6, 0)
    # without the other options, x2 stays: its wait hides TF32, which then saves nothing
    assert plain is not None and plain.options == ("x2",)
    assert plain.predicted_step_ms == pytest.approx(1.0, rel=0.01)


def _plan_of(subsets: tuple[PlanSubset, ...], ids: tuple[str, ...]) -> rem.Plan:
    return rem.Plan(rank=0, measured_ms=20.0, baseline_ms=20.0, predicted_step_ms=3.0,
                    est_saving_ms=17.0, est_saving_pct=85.0, remedy_ids=ids,
                    options=ids, subsets=subsets)


def test_reports_carry_the_subsets_and_name_the_best_pair() -> None:
    a = PlanSubset(("cuda_graphs", "pinned_copies"), ("cuda_graphs", "pinned_copies"), 4.1,
                   15.9, 79.5)
    b = PlanSubset(("cuda_graphs", "remove_syncs"), ("cuda_graphs", "remove_syncs"), 9.0,
                   11.0, 55.0)
    plan = _plan_of((b, a), ("cuda_graphs", "pinned_copies", "remove_syncs"))
    assert pair_text(plan) == "cuda_graphs + pinned_copies together: -> 4.10 ms/step (save 80%)"
    assert pair_text(_plan_of((), ("cuda_graphs", "pinned_copies"))) is None  # the plan is it
    r = rem.Remedy("cuda_graphs", "CUDA graphs", 0, (), 20.0, 9.0, 11.0, 55.0, "cuda_graphs",
                   (), (), ())
    ra = rem.RemedyAdvice((), (r,), plan)
    d = remedies_json(ra)["plan"]
    assert d["subsets"][1] == {"remedy_ids": ("cuda_graphs", "pinned_copies"),
                               "options": ("cuda_graphs", "pinned_copies"),
                               "predicted_step_ms": 4.1, "est_saving_ms": 15.9,
                               "est_saving_pct": 79.5}
    lines = [str(x) for x in remedy_lines(ra)]
    assert lines[-1] == ("Best pair: cuda_graphs + pinned_copies together: -> 4.10 ms/step "
                         "(save 80%)")


def test_a_real_trace_gets_every_pair_of_its_helping_remedies(tmp_path: Any) -> None:
    from pathlib import Path

    from stepscope.advisor import advise
    from stepscope.analysis import analyze
    from stepscope.importers import import_traces
    from stepscope.store import Run

    data = Path(__file__).resolve().parents[1] / "data"
    run = Run(import_traces([data / "cnn_fp32_sync.pt.trace.json.gz"], tmp_path / "run"))
    ra = advise(analyze(run, workers=1)).remedies
    assert ra is not None and ra.plan is not None
    helping = [r.id for r in ra.remedies if r.est_saving_pct >= rem.MIN_SAVING_PCT]
    assert {"tf32", "bf16_amp"} <= set(helping) and len(ra.plan.remedy_ids) >= 3
    pairs = {frozenset(s.remedy_ids) for s in ra.plan.subsets if len(s.remedy_ids) == 2}
    want = {frozenset((a, b)) for i, a in enumerate(helping[:8]) for b in helping[i + 1:8]
            if {a, b} != {"tf32", "bf16_amp"}}
    assert pairs == want - {frozenset(ra.plan.remedy_ids)}
    for s in ra.plan.subsets:  # savings from the plan's baseline, as every remedy's
        assert s.predicted_step_ms + s.est_saving_ms == pytest.approx(ra.plan.baseline_ms,
                                                                      abs=1e-3)
        assert set(s.remedy_ids) != set(ra.plan.remedy_ids)
