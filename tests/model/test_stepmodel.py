"""The step model: hand-built models with hand-computed replays, each edit, the plan's
non-additivity, the trap (a readback on a host-bound step), and the real fixtures' replay error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from stepscope.advisor import advise
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.stepmodel import build_step_model, edits, replay
from stepscope.model.stepmodel.steps import (
    WAIT_ALL,
    WAIT_NONE,
    CopyDir,
    GpuOps,
    HostEvents,
    HostKind,
    OpKind,
    StepModel,
    SyncRole,
)
from stepscope.store import Run

DATA = Path(__file__).resolve().parents[1] / "data"
L, K = HostKind.LAUNCH, HostKind.BLOCK


def model(events: list[tuple[int, int, int, int]], ops: list[tuple[int, int, int, int]],
          *, threads: int = 1, streams: int = 1, tail: int = 0,
          wait: dict[int, int] | None = None, dep: dict[int, int] | None = None,
          role: dict[int, int] | None = None) -> StepModel:
    """events: (thread, kind, pre, own) after the step's start mark (event 0);
    ops: (trigger event, stream, dur, lat)."""
    n = len(events) + 1
    ev = [(0, int(HostKind.MARK), 0, 0), *events]
    w = np.full(n, WAIT_NONE, dtype=np.int64)
    for e, s in (wait or {}).items():
        w[e] = s
    r = np.zeros(n, dtype=np.int8)
    for e, x in (role or {}).items():
        r[e] = x
    d = np.full(len(ops), -1, dtype=np.int64)
    for j, x in (dep or {}).items():
        d[j] = x
    z = np.zeros(len(ops), dtype=np.int64)
    host = HostEvents(
        thread=np.array([e[0] for e in ev], dtype=np.int64),
        kind=np.array([e[1] for e in ev], dtype=np.int8),
        pre=np.array([e[2] for e in ev], dtype=np.int64),
        own=np.array([e[3] for e in ev], dtype=np.int64), wait=w,
        back=np.zeros(n, dtype=np.int64), after=np.full(n, -1, dtype=np.int64), role=r,
        copy=np.zeros(n, dtype=np.int8), pageable=np.zeros(n, dtype=bool),
        name=np.zeros(n, dtype=np.int64), start=np.zeros(n, dtype=np.int64))
    g = GpuOps(trigger=np.array([o[0] for o in ops], dtype=np.int64),
               stream=np.array([o[1] for o in ops], dtype=np.int64),
               kind=np.full(len(ops), int(OpKind.KERNEL), dtype=np.int8),
               dur=np.array([o[2] for o in ops], dtype=np.int64),
               lat=np.array([o[3] for o in ops], dtype=np.int64), gap=z.copy(), dep=d,
               row=np.arange(len(ops), dtype=np.int64), nbytes=z.copy(),
               comm=np.zeros(len(ops), dtype=bool))
    return StepModel(rank=0, step_index=0, measured_ns=1, step_ns=1, steady_steps=1,
                     threads=tuple((1, t) for t in range(threads)),
                     streams=tuple((0, s) for s in range(streams)), names=("x",), host=host,
                     ops=g, tail=np.full(threads, tail, dtype=np.int64), launch_latency_ns=5)


def test_host_bound_step_is_the_host_time() -> None:
    # three launches of 100 + 10 ns host each; their kernels take 20 ns: the host sets the pace
    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5), (2, 0, 20, 5), (3, 0, 20, 5)], tail=40)
    r = replay(m)
    assert r.step_ns == pytest.approx(3 * 110 + 40)
    assert r.host_busy_ns == (370,)
    assert r.gpu_busy_ns == 60


def test_gpu_bound_step_is_the_gpu_time() -> None:
    m = model([(0, L, 10, 10)] * 2, [(1, 0, 1000, 5), (2, 0, 1000, 5)])
    assert replay(m).step_ns == pytest.approx(2000)


def test_sync_bound_step_waits_for_its_kernel() -> None:
    # launch at 10 (ends 20); kernel 10+0 .. 1010; the sync waits until 1010, then 5 ns more
    m = model([(0, L, 10, 10), (0, K, 0, 5)], [(1, 0, 1000, 0)], wait={2: WAIT_ALL},
              role={2: SyncRole.EXPLICIT})
    assert replay(m).step_ns == pytest.approx(1015)
    # without the sync the host runs ahead: the GPU sets the pace
    free = edits.unblock(m, np.array([False, False, True]), 0)
    assert replay(free).step_ns == pytest.approx(1000)


def test_two_streams_overlap_unless_one_waits_for_the_other() -> None:
    # kernels start at 10+5 and 20+5; a device sync ends the step
    ev = [(0, L, 10, 10), (0, L, 0, 10), (0, K, 0, 0)]
    both = model(ev, [(1, 0, 1000, 5), (2, 1, 1000, 5)], streams=2, wait={3: WAIT_ALL})
    assert replay(both).step_ns == pytest.approx(1025)
    chained = model(ev, [(1, 0, 1000, 5), (2, 1, 1000, 5)], streams=2, dep={1: 0},
                    wait={3: WAIT_ALL})
    assert replay(chained).step_ns == pytest.approx(2015)


def test_scale_ops_and_the_minimum_kernel() -> None:
    m = model([(0, L, 10, 10)] * 2, [(1, 0, 100_000, 5), (2, 0, 2_500, 5)])
    x = edits.scale_ops(m, np.array([0.25, 0.25]))
    assert x.ops.dur.tolist() == [25_000, 2_000]  # never below MIN_KERNEL_NS (2 us)
    assert replay(x).step_ns == pytest.approx(27_000)


def test_graph_regions_replace_the_dispatch_cost() -> None:
    # 30 launches with 50 us of dispatch each, 2 us kernels: host-bound at 30 x 60 us
    m = model([(0, L, 50_000, 10_000)] * 30, [(e, 0, 2_000, 5_000) for e in range(1, 31)])
    assert replay(m).step_ns == pytest.approx(30 * 60_000)
    regions = edits.launch_regions(m)
    assert regions == [list(range(1, 31))]
    g = edits.graph_regions(m, regions)
    # one graph launch (first pre kept + 10 us), then 30 kernels 1 us apart on the GPU
    per = replay(g).step_ns
    assert per == pytest.approx(30 * 2_000 + 29 * edits.GRAPH_NODE_GAP_NS, rel=0.05)
    assert per < 0.1 * replay(m).step_ns


def test_launch_regions_split_at_waits_and_keep_long_host_work() -> None:
    ev = [(0, L, 10, 10)] * 25 + [(0, K, 0, 5)] + [(0, L, 10, 10)] * 5
    m = model(ev, [(1, 0, 100, 5)], wait={26: WAIT_ALL})
    assert edits.launch_regions(m) == [list(range(1, 26))]
    long = model([(0, L, 2_000_000, 10)] * 25, [(1, 0, 100, 5)])
    g = edits.graph_regions(long, edits.launch_regions(long))
    assert g.host.pre[1:].tolist() == [2_000_000] * 25  # CPU work, not dispatch: stays


def test_copies_at_and_shorten_input() -> None:
    m = model([(0, L, 0, 10), (0, HostKind.INPUT, 0, 4_000)], [(1, 0, 8_000, 0)])
    m = m.with_ops(kind=np.array([OpKind.MEMCPY], dtype=np.int8),
                   nbytes=np.array([200_000], dtype=np.int64))
    fast = edits.copies_at(m, np.array([True]), 50.0)  # 200 kB at 50 GB/s = 4 us
    assert fast.ops.dur.tolist() == [4_000]
    half = edits.shorten_input(m, 0.5)
    assert half.host.own.tolist() == [0, 10, 2_000]


def test_the_plan_is_not_the_sum_of_the_remedies() -> None:
    # host-bound by dispatch: 30 x (50 us host + 10 us launch) = 1.8 ms; kernels 40 us each
    m = model([(0, L, 50_000, 10_000)] * 30, [(e, 0, 40_000, 5_000) for e in range(1, 31)])
    base = replay(m).step_ns

    def graphs(x: StepModel) -> StepModel:
        return edits.graph_regions(x, edits.launch_regions(x))

    def faster(x: StepModel) -> StepModel:
        return edits.scale_ops(x, np.full(30, 0.25))

    alone_g = base - replay(graphs(m)).step_ns
    alone_f = base - replay(faster(m)).step_ns
    both = base - replay(faster(graphs(m))).step_ns
    assert alone_f == pytest.approx(0.0, abs=1.0)  # faster kernels do nothing host-bound
    assert both > alone_g + alone_f + 100_000  # together they save more than the sum
    assert both == pytest.approx(base - (30 * 10_000 + 29 * edits.GRAPH_NODE_GAP_NS + 10_000 + 50_000), rel=0.1)


def test_the_trap_removing_a_readback_on_a_host_bound_step_saves_nothing() -> None:
    # micro-steps: launch (500 us host), 100 us of host work, then .item() (DtoH + sync); the
    # kernel (50 us) is done long before the host reads it: the host launch rate is the limit
    ev: list[tuple[int, int, int, int]] = []
    ops = []
    for i in range(4):
        ev += [(0, L, 500_000, 10_000), (0, K, 100_000, 5_000)]
        ops.append((2 * i + 1, 0, 50_000, 5_000))
    m = model(ev, ops, wait={2 * i + 2: WAIT_ALL for i in range(4)},
              role={2 * i + 2: SyncRole.READBACK for i in range(4)})
    base = replay(m).step_ns
    mask = m.host.role == SyncRole.READBACK
    saved = base - replay(edits.unblock(m, mask)).step_ns
    assert saved == pytest.approx(0.0, abs=1.0)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    out = {}
    for name in ("cnn_fp32_sync", "gpt_bf16_adamw", "h200_numpy_roundtrip",
                 "h200_pageable_batch", "h200_tiny_h2d"):
        path = import_traces([DATA / f"{name}.pt.trace.json.gz"],
                             tmp_path_factory.mktemp(name) / "run")
        out[name] = Run(path)
    return out


@pytest.mark.parametrize("name", ["cnn_fp32_sync", "gpt_bf16_adamw", "h200_numpy_roundtrip",
                                  "h200_pageable_batch", "h200_tiny_h2d"])
def test_real_fixtures_replay_within_5_percent(fixtures: dict[str, Run], name: str) -> None:
    a = analyze(fixtures[name], workers=1)
    for ra in a.ranks:
        m = build_step_model(a.graph.rank(ra.rank), ra)
        assert m is not None
        err = (replay(m).step_ns - m.measured_ns) / m.measured_ns
        assert abs(err) <= 0.05, (name, err)


def test_report_advice_carries_fit_remedies_and_plan(fixtures: dict[str, Run]) -> None:
    a = analyze(fixtures["cnn_fp32_sync"], workers=1)
    adv = advise(a)
    ra = adv.remedies
    assert ra is not None and ra.fits and abs(ra.fits[0].error_pct) <= 5
    ids = [r.id for r in ra.remedies]
    assert "tf32" in ids and "bf16_amp" in ids  # an fp32 conv net
    tf32 = next(r for r in ra.remedies if r.id == "tf32")
    assert tf32.finding_ids == ("no_tensor_cores",)
    assert tf32.predicted_step_ms + tf32.est_saving_ms == pytest.approx(tf32.baseline_ms, abs=1e-3)
    # a torch.profiler trace: the baseline is the step without the profiler's host cost
    assert tf32.baseline_ms <= ra.fits[0].measured_ms
    assert ra.plan is not None
    assert not {"tf32", "bf16_amp"} <= set(ra.plan.remedy_ids)  # alternatives: one of them
    # bf16 on a PyTorch trace: the host work of autocast's casts is in its prediction
    amp = next(r for r in ra.remedies if r.id == "bf16_amp")
    assert any(a.startswith("bf16 autocast's casts on the host") for a in amp.assumptions)
    assert ra.plan.est_saving_ms >= max(r.est_saving_ms for r in ra.remedies) - 1e-6


def test_an_event_sync_on_a_step_in_flight_lets_the_host_run_ahead() -> None:
    # host 300 ns per step, GPU 1000: waiting for everything at the step's start serialises
    # (the host's 290 before the launch, then the kernel's 1000), as does waiting for the step
    # before (back 1: all of it); waiting for the one before that (two steps in flight) lets
    # the host run a step ahead, and the GPU sets the pace
    ev = [(0, K, 0, 0), (0, L, 290, 10)]
    serial = model(ev, [(2, 0, 1000, 0)], wait={1: WAIT_ALL})
    assert replay(serial).step_ns == pytest.approx(1290)
    one = serial.with_host(back=np.array([0, 1, 0], dtype=np.int64))
    assert replay(one).step_ns == pytest.approx(1290)
    ahead = serial.with_host(back=np.array([0, 2, 0], dtype=np.int64))
    assert replay(ahead).step_ns == pytest.approx(1000)


def test_untraced_takes_the_profilers_host_cost_out() -> None:
    from stepscope.model.stepmodel.profiler import untraced
    from stepscope.model.stepmodel.steps import ProfilerCost

    m = model([(0, L, 100, 10)] * 3, [(1, 0, 20, 5)], tail=40)
    p = ProfilerCost(pre=np.array([0, 30, 30, 200]), own=np.array([0, 4, 4, 4]),
                     tail=np.array([10]))
    bare = untraced(replace(m, profiler=p))
    assert bare.host.pre.tolist() == [0, 70, 70, 0]  # never below zero
    assert bare.host.own.tolist() == [0, 6, 6, 6]
    assert bare.tail.tolist() == [30]
    assert replay(bare).step_ns == pytest.approx(70 + 6 + 70 + 6 + 0 + 6 + 30)
    assert untraced(m) is m  # no profiler cost: unchanged


@pytest.mark.parametrize(("name", "remedy", "finding"), [
    ("h200_pageable_batch", "pinned_copies", "pageable_memcpy"),
    ("h200_numpy_roundtrip", "remove_round_trip", "sync_calls"),
    ("h200_numpy_roundtrip", "ops_to_gpu", "excess_transfers"),
])
def test_real_fixtures_get_the_remedy_of_their_planted_problem(
        fixtures: dict[str, Run], name: str, remedy: str, finding: str) -> None:
    ra = advise(analyze(fixtures[name], workers=1)).remedies
    assert ra is not None
    got = {r.id: r for r in ra.remedies}
    assert remedy in got and finding in got[remedy].finding_ids
    assert got[remedy].est_saving_pct > 5
    assert ra.plan is not None and remedy in ra.plan.remedy_ids


def test_the_replay_decides_communication_overlap_saves_nothing_host_bound(
        tmp_path: Path) -> None:
    # an eager B200 step: host-bound (launch_bound), its all-reduce exposed: overlapping the
    # collective is offered for the finding but saves nothing alone while the host sets the pace
    run = Run(import_traces([DATA / "collectives" / "tracelens_b200_eager_trace.json.gz"],
                            tmp_path / "run"))
    adv = advise(analyze(run, workers=1))
    assert "exposed_communication" in {f.id for f in adv.findings}
    got = {r.id: r for r in adv.remedies.remedies} if adv.remedies else {}
    assert "comm_overlap" in got and got["comm_overlap"].est_saving_pct < 1
    assert "cuda_graphs" in got and got["cuda_graphs"].est_saving_pct > 20
    assert adv.remedies is not None and adv.remedies.plan is not None
    # once CUDA graphs take the host off the critical path the GPU sets it, and overlapping the
    # collective (and fuller grids) then help: they join the plan, which beats graphs alone
    plan = adv.remedies.plan
    assert plan.remedy_ids[0] == "cuda_graphs"
    assert set(plan.remedy_ids) == {"cuda_graphs", "comm_overlap", "larger_batch"}
    assert plan.predicted_step_ms < 0.99 * got["cuda_graphs"].predicted_step_ms
    pair = {s.remedy_ids: s for s in plan.subsets}[("cuda_graphs", "comm_overlap")]
    assert pair.predicted_step_ms < 0.99 * got["cuda_graphs"].predicted_step_ms


def test_json_and_terminal_reports_carry_the_remedies(fixtures: dict[str, Run]) -> None:
    from stepscope.reporters.json_report import report_dict
    from stepscope.reporters.report import build_report
    from stepscope.reporters.terminal import render_text

    rep = build_report(fixtures["h200_pageable_batch"], workers=1)
    d = report_dict(rep)
    sm = d["step_model"]
    assert set(sm) >= {"rank", "measured_ms", "replayed_ms", "error_pct", "ranks"}
    assert abs(sm["error_pct"]) <= 5
    r = next(x for x in d["remedies"] if x["id"] == "pinned_copies")
    assert set(r) >= {"id", "title", "finding_ids", "predicted_step_ms", "est_saving_ms",
                      "est_saving_pct", "options", "assumptions"}
    assert r["predicted_step_ms"] + r["est_saving_ms"] == pytest.approx(r["baseline_ms"], abs=1e-3)
    assert d["plan"]["remedy_ids"] and d["plan"]["predicted_step_ms"] < d["plan"]["baseline_ms"]
    text = render_text(rep)
    assert "Remedies (each replayed on the step model" in text
    assert "Plan: " in text and "Step model: the step replays in" in text
    # the plan's saving is from the same baseline as the remedies' (a profiler trace: the
    # step without the profiler's cost), and the line says which step that is
    plan = d["plan"]
    assert f"from {plan['baseline_ms']:.2f} ms" in " ".join(text.split())


def test_a_synthetic_trace_builds_the_model_by_hand(tmp_path: Path) -> None:
    from builder import TraceBuilder

    # per 1000 us step: a launch at +10 (10 us) of a 600 us kernel that starts at +25; a
    # stream sync from +30 that returns 5 us after the kernel ends; then host work to the end
    b = TraceBuilder()
    for i in range(6):
        t = 1000.0 * i
        b.step(t, 1000, step=i)
        b.kernel("gemm", t + 25, 600, launch=(t + 10, 10))
        b.sync("cudaStreamSynchronize", t + 30, 600)
    run = b.build(tmp_path / "run")
    a = analyze(run, workers=1)
    ra = a.ranks[0]
    m = build_step_model(a.graph.rank(0), ra)
    assert m is not None and 0 < m.step_index < 5  # not the trace's first or last step
    h = m.host
    assert h.kind.tolist() == [HostKind.MARK, L, K]
    assert h.pre.tolist() == [0, 10_000, 10_000]
    assert h.own.tolist() == [0, 10_000, 5_000]  # the sync's own cost after its wait
    assert h.role.tolist() == [0, 0, SyncRole.EXPLICIT]
    assert m.tail.tolist() == [370_000]
    assert m.ops.lat.tolist() == [15_000] and m.ops.dur.tolist() == [600_000]
    assert replay(m).step_ns == pytest.approx(1_000_000)
    assert m.measured_ns == 1_000_000
    # without the sync the GPU sets the pace: 600 us
    free = edits.unblock(m, h.role == SyncRole.EXPLICIT, 0)
    assert replay(free).step_ns == pytest.approx(600_000)


def _round_trip_model(between: int = 1_000) -> StepModel:
    """launch (kernel 100) | DtoH copy (blocking, 50 on the GPU) | sync | ``between`` ns of
    host work, HtoD copy (blocking, 60) | launch (kernel 100); lat 0, own 5..10."""
    ev = [(0, L, 10, 10), (0, K, 0, 5), (0, K, 0, 5), (0, K, between, 5), (0, L, 10, 10)]
    m = model(ev, [(1, 0, 100, 0), (2, 0, 50, 0), (4, 0, 60, 0), (5, 0, 100, 0)],
              wait={2: WAIT_ALL, 3: WAIT_ALL, 4: WAIT_ALL},
              role={2: SyncRole.BLOCKING_COPY, 3: SyncRole.READBACK,
                    4: SyncRole.BLOCKING_COPY})
    copy = np.array([0, 0, CopyDir.DTOH, CopyDir.DTOH, CopyDir.HTOD, 0], dtype=np.int8)
    kind = np.array([OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMCPY, OpKind.KERNEL],
                    dtype=np.int8)
    return m.with_host(copy=copy).with_ops(kind=kind, nbytes=np.array([0, 800, 800, 0]))


def test_round_trips_are_found_and_done_on_the_gpu() -> None:
    m = _round_trip_model()
    # by hand: the host waits for the kernel and the DtoH copy (110 + 50, +5), the sync (+5),
    # 1000 of host work, the HtoD copy (60 + 5), then launches the last kernel; in the steady
    # state each step's first kernel queues behind the last: 100 + 50 + 5 + 5 + 1000 + 65
    # + 10 + 100 = 1335 per step
    assert replay(m).step_ns == pytest.approx(1335)
    trips = edits.round_trips(m)
    assert trips == [[2, 3, 4]]
    x = edits.ops_to_gpu(m, trips, [30], launch_ns=10)
    assert x.host.pre.tolist() == [0, 10, 0, 0, 0, 10]
    assert x.host.own.tolist() == [0, 10, 10, 0, 0, 10]
    assert x.ops.dur.tolist() == [100, 30, 0, 100]
    # nothing waits any more: the GPU sets the pace, kernel + the GPU op + kernel
    assert replay(x).step_ns == pytest.approx(230)


def test_a_round_trip_needs_the_copy_back_without_a_launch_between() -> None:
    m = _round_trip_model()
    # a kernel launched between the copies: the data was not just computed on and sent back
    launch_between = m.with_host(kind=np.array([0, L, K, L, K, L], dtype=np.int8))
    assert edits.round_trips(launch_between) == []
    # the sync after a blocking .to(device) belongs to the trip
    ev = [(0, L, 10, 10), (0, K, 0, 5), (0, K, 500, 5), (0, K, 0, 5), (0, L, 10, 10)]
    m2 = model(ev, [(1, 0, 100, 0), (2, 0, 50, 0), (3, 0, 60, 0), (5, 0, 100, 0)],
               wait={2: WAIT_ALL, 3: WAIT_ALL, 4: WAIT_ALL},
               role={2: SyncRole.BLOCKING_COPY, 3: SyncRole.BLOCKING_COPY,
                     4: SyncRole.COPY_SYNC})
    m2 = m2.with_host(copy=np.array([0, 0, CopyDir.DTOH, CopyDir.HTOD, CopyDir.HTOD, 0],
                                    dtype=np.int8)).with_ops(
        kind=np.array([OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMCPY, OpKind.KERNEL],
                      dtype=np.int8))
    assert edits.round_trips(m2) == [[2, 3, 4]]


def test_a_call_still_running_at_the_step_start_is_not_host_work(tmp_path: Path) -> None:
    from builder import TraceBuilder

    # per 1000 us step: the previous step's stream sync returns at +60 (5 us after its
    # kernel); a launch at +70 (10 us) of a 975 us kernel starting at +80; a sync from +80
    # that returns at +60 of the next step. The 60 us at the start are the sync's, not host
    # work: the launch's host work is the 10 us after the sync returned
    b = TraceBuilder()
    for i in range(6):
        t = 1000.0 * i
        b.step(t, 1000, step=i)
        b.kernel("gemm", t + 80, 975, launch=(t + 70, 10))
        b.sync("cudaStreamSynchronize", t + 80, 980)
    run = b.build(tmp_path / "run")
    a = analyze(run, workers=1)
    m = build_step_model(a.graph.rank(0), a.ranks[0])
    assert m is not None
    assert m.host.pre.tolist() == [0, 10_000, 0]
    # by hand: sync end + 10 (host) + 10 (launch latency) + 975 + 5 (the sync's own) = 1000
    assert replay(m).step_ns == pytest.approx(1_000_000, rel=0.01)


def test_a_hand_over_to_another_thread_ends_a_graph_region() -> None:
    # two backward passes on thread 1, each handed over from thread 0 (loss.backward()):
    # two graphs, two graph launches, and each pass keeps the hand-over's 200 us
    ev = ([(0, L, 10, 10)] + [(1, L, 200_000, 10_000)] + [(1, L, 50_000, 10_000)] * 24
          + [(0, L, 10, 10)] + [(1, L, 200_000, 10_000)] + [(1, L, 50_000, 10_000)] * 24)
    m = model(ev, [(e, 0, 2_000, 5_000) for e in range(1, len(ev) + 1)], threads=2)
    after = m.host.after.copy()
    after[2], after[28] = 1, 27
    m = m.with_host(after=after)
    assert edits.launch_regions(m) == [list(range(2, 27)), list(range(28, 53))]
    g = edits.graph_regions(m, edits.launch_regions(m))
    assert g.host.pre[[2, 28]].tolist() == [200_000, 200_000]
    assert g.host.own[[2, 28]].tolist() == [edits.GRAPH_LAUNCH_NS] * 2


def test_ops_to_gpu_agrees_with_the_round_trip_finding(fixtures: dict[str, Run]) -> None:
    # the same fix estimated two ways: the excess_transfers rule (no-kernel time of the round
    # trip's span) and the replay without the trip; keeping the host compute (the readback
    # removed only) saves far less
    adv = advise(analyze(fixtures["h200_numpy_roundtrip"], workers=1))
    assert adv.remedies is not None
    found = {f.id: f for f in adv.findings}
    got = {r.id: r for r in adv.remedies.remedies}
    ex = found["excess_transfers"].est_saving_pct
    assert got["ops_to_gpu"].est_saving_pct == pytest.approx(ex, rel=0.2)
    assert got["ops_to_gpu"].est_saving_pct > 2 * got["remove_round_trip"].est_saving_pct


def test_a_graph_replays_the_shortest_repetition_of_a_region() -> None:
    from stepscope.model.stepmodel.catalog import fixed_sequences

    # a micro-step of 20 launches, a sync, the next micro-step: the same 20 launches with 5
    # adds of its own between them (gradient accumulation), a sync, 22 launches of another
    # kind (another region: left whole)
    first = [f"k{i}" for i in range(20)]
    second = first[:3] + ["add"] * 2 + first[3:10] + ["add"] * 3 + first[10:]
    other = ["opt"] * 22
    keys = ["mark", *first, "sync", *second, "sync", *other]
    ev = ([(0, L, 50_000, 10_000)] * 20 + [(0, K, 0, 5_000)] + [(0, L, 50_000, 10_000)] * 25
          + [(0, K, 0, 5_000)] + [(0, L, 50_000, 10_000)] * 22)
    m = model(ev, [(e, 0, 2_000, 5_000) for e in range(1, len(ev) + 1) if keys[e] != "sync"],
              wait={21: WAIT_ALL, 47: WAIT_ALL})
    regions = edits.launch_regions(m)
    assert [len(r) for r in regions] == [20, 25, 22]
    graphed = fixed_sequences(regions, m.host.thread, keys)
    assert graphed[0] == regions[0] and graphed[2] == regions[2]
    adds = [e for e in regions[1] if keys[e] == "add"]
    assert len(adds) == 5 and graphed[1] == [e for e in regions[1] if keys[e] != "add"]
    # by hand, from the second graph's launch T to the sync's return: whole, the graph's 25
    # kernels run from T + 10 us (2 us each, 0.2 us apart): T + 62.605 + 5 = T + 67.605 us;
    # with the adds eager (50 + 10 us of host each, their kernels 5 us after their launch),
    # the graph's kernels follow the host through the adds: the last 10 start at T + 310.005
    # and end at T + 331.805, + 5 = T + 336.805 us: 269.2 us more per step
    whole = replay(edits.graph_regions(m, regions)).step_ns
    fixed = replay(edits.graph_regions(m, graphed)).step_ns
    assert fixed - whole == pytest.approx(269_200, abs=1)


def test_a_launch_without_a_gpu_record_keeps_its_stream_busy(tmp_path: Path) -> None:
    from builder import TraceBuilder

    # per 3000 us step: kernel a (launched at +10, runs +15..+35); a cuLaunchKernel at +40
    # whose kernel the trace lacks (it ran +50..+1550); kernel b launched at +60 starts at
    # +1550 (1490 us after its launch on an idle stream: no latency is that long) and runs
    # 100 us; a stream sync from +70 returns at +1655
    b = TraceBuilder()
    for i in range(6):
        t = 3000.0 * i
        b.step(t, 3000, step=i)
        b.kernel("a", t + 15, 20, launch=(t + 10, 10))
        b.api("cuLaunchKernel", t + 40, 10)
        b.kernel("b", t + 1550, 100, launch=(t + 60, 10))
        b.sync("cudaStreamSynchronize", t + 70, 1585)
    run = b.build(tmp_path / "run")
    a = analyze(run, workers=1)
    m = build_step_model(a.graph.rank(0), a.ranks[0])
    assert m is not None
    o = m.ops
    assert o.kind.tolist() == [OpKind.KERNEL, OpKind.UNSEEN, OpKind.KERNEL]
    # the missing kernel: from its launch + the median latency (5 us, kernel a's) to b's start
    assert o.dur.tolist() == [20_000, 1_505_000, 100_000] and o.row[1] == -1
    assert o.lat[2] == 5_000 and o.gap[2] == 0
    assert replay(m).step_ns == pytest.approx(3_000_000, rel=0.01)
    # without the sync the GPU sets the pace: a + the missing kernel + b, back to back
    free = edits.unblock(m, m.host.kind == K, 0)
    assert replay(free).step_ns == pytest.approx(1_625_000, rel=0.01)


def test_the_representative_step_is_typical_in_its_span_and_its_markers() -> None:
    from types import SimpleNamespace

    from stepscope.model.stepmodel import representative_step

    def step(i: int, start: int, end: int, span: int) -> SimpleNamespace:
        return SimpleNamespace(index=i, start_ns=start, end_ns=end, span_ns=span)

    # markers 14, 14, 13, 53, 16, 15, 14 ms; GPU-anchored spans 15, 13, 51, 18, 16, 21, 14 ms
    # (the step before the 53 ms one took its GPU idle time). Inner steps 1-5: spans 13, 51,
    # 18, 16, 21 (median 18), markers 14, 13, 53, 16, 15 (median 15). Step 3's span is the
    # median, but its markers hold a 46 ms input wait (253% off); step 4 is 11% and 7% off,
    # step 5 17% and 0%, step 1 28% and 7%: step 4 is the typical one
    ms = 1_000_000
    marks = [14, 14, 13, 53, 16, 15, 14]
    spans = [15, 13, 51, 18, 16, 21, 14]
    t, steps = 0, []
    for i, (mk, sp) in enumerate(zip(marks, spans)):
        steps.append(step(i, t, t + mk * ms, sp * ms))
        t += mk * ms
    ra = SimpleNamespace(steps=SimpleNamespace(steps=tuple(steps), steady=tuple(steps)))
    assert representative_step(ra) == 4  # type: ignore[arg-type]


def test_the_steps_tail_is_the_process_main_threads(tmp_path: Path) -> None:
    from builder import TraceBuilder

    # per 1000 us step: the backward thread (tid 200) launches first, at +5; the main thread
    # (tid == pid 100) launches at +100 and syncs at +200 for 5 us; the rest of the step is
    # the main thread's host work (795 us), not the backward thread's idle time (985 us): a
    # step recovered from periodicity may well start inside the backward pass
    b = TraceBuilder()
    for i in range(6):
        t = 1000.0 * i
        b.step(t, 1000, step=i)
        b.kernel("bwd", t + 20, 50, launch=(t + 5, 10), tid=200)
        b.kernel("fwd", t + 115, 50, launch=(t + 100, 10))
        b.sync("cudaStreamSynchronize", t + 200, 5)
    a = analyze(b.build(tmp_path / "run"), workers=1)
    m = build_step_model(a.graph.rank(0), a.ranks[0])
    assert m is not None and m.threads == ((100, 100), (100, 200))
    assert m.tail.tolist() == [795_000, 0]
    assert replay(m).step_ns == pytest.approx(1_000_000, rel=0.01)
