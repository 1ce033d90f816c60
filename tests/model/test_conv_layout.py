"""cuDNN's layout transposes around NCHW convolutions (``model.stepmodel.conv_layout``): found
per conv layer on a hand-built model, each a launch on the host; on a real H100 trace
of an NCHW conv net, TF32 and bf16 carry them and bf16 + channels_last does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.model.test_stepmodel import model

from stepscope.advisor.remedies import rank_remedies
from stepscope.analysis import analyze
from stepscope.importers import import_traces
from stepscope.model.stepmodel import replay
from stepscope.model.stepmodel.conv_layout import (
    PER_PASS,
    TRANSPOSE_NS,
    layout_transposes,
    with_transposes,
)
from stepscope.model.stepmodel.steps import HostKind, StepModel
from stepscope.store import Run

DATA = Path(__file__).resolve().parents[1] / "data"
L = HostKind.LAUNCH


def _net() -> tuple[StepModel, np.ndarray, np.ndarray]:
    """Forward (thread 0): a conv layer run as a conv kernel then a GEMM kernel (cuDNN's FFT
    path: one layer, one run), an activation, a linear layer, an activation; backward (thread
    1): the linear's two GEMMs, an elementwise op, the conv's two kernels."""
    events = [(0, L, 10_000, 2_000), (0, L, 1_000, 2_000), (0, L, 10_000, 3_000),
              (0, L, 10_000, 2_000), (0, L, 10_000, 3_000),
              (1, L, 10_000, 2_000), (1, L, 1_000, 2_000), (1, L, 10_000, 3_000),
              (1, L, 10_000, 2_000), (1, L, 1_000, 2_000)]
    ops = [(e + 1, 0, 5_000, 0) for e in range(len(events))]
    cand = np.array([True, True, False, True, False, True, True, False, True, True])
    conv = np.array([True, False, False, False, False, False, False, False, True, False])
    m = model(events, ops, threads=2)
    return m.with_host(start=np.arange(m.host.size, dtype=np.int64) * 20_000), cand, conv


def test_transposes_per_conv_layer_as_host_launches() -> None:
    m, cand, conv = _net()
    t = layout_transposes(m, cand, conv)
    assert t is not None
    # one conv layer (its run holds a GEMM kernel too); the linear layer has none
    assert t.layers == 1 and t.count == 3 * PER_PASS
    # forward: before the conv layer's run (event 1); backward: the run holding the conv's
    # kernels (events 9-10), not the linear's (6-7)
    assert t.events.tolist() == [1, 9] and t.ns.tolist() == [PER_PASS * TRANSPOSE_NS,
                                                             2 * PER_PASS * TRANSPOSE_NS]
    edited = with_transposes(m, t)
    assert (edited.host.pre - m.host.pre).sum() == t.count * TRANSPOSE_NS
    assert replay(edited).step_ns >= replay(m).step_ns
    assert layout_transposes(m, cand, np.zeros_like(conv)) is None  # no conv layer


@pytest.fixture(scope="module")
def conv_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run(import_traces([DATA / "h100_conv_fp32.pt.trace.json.gz"],
                             tmp_path_factory.mktemp("conv") / "run"))


def test_an_nchw_conv_net_pays_the_transposes_and_channels_last_does_not(conv_run: Run
                                                                         ) -> None:
    a = analyze(conv_run, workers=1)
    rr = rank_remedies(a, a.ranks[0])
    assert rr is not None
    by_id = {r.id: r for r in rr.remedies}
    said = "cuDNN transposes to NHWC and back, 54 transposes a step for 6 conv layers"
    assert any(said in s for s in by_id["tf32"].assumptions)
    opts = {o.name: o for o in by_id["bf16_amp"].options}
    assert any(said in s for s in opts["bf16_amp"].assumptions)
    assert not any(said in s for s in opts["channels_last"].assumptions)
    assert any("measured on channels_last tensors" in s for s in
               opts["channels_last"].assumptions)
    # measured in all nine data sets: bf16 + channels_last ran faster than bf16 on NCHW
    assert opts["channels_last"].predicted_step_ms < opts["bf16_amp"].predicted_step_ms
