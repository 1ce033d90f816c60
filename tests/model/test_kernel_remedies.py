"""The precision remedies' kernel factors (``model.stepmodel.kernel_remedies``): a GEMM kernel
that is part of a convolution takes the conv ratio, found by the op that launched it or, in a
recorded run without framework ops, by its layer's run of launches; on a real H100 conv net,
the TF32 option's GPU time is the one its fixed program's trace measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.model.test_conv_layout import _net

from stepscope.analysis import Analysis, RankAnalysis, analyze
from stepscope.importers import import_traces
from stepscope.model.profiler_cost import step_costs
from stepscope.model.stepmodel import build_step_model, replay
from stepscope.model.stepmodel.kernel_remedies import conv_members, precision
from stepscope.model.stepmodel.profiler import untraced
from stepscope.model.stepmodel.steps import StepModel
from stepscope.store import Run

DATA = Path(__file__).resolve().parents[1] / "data"


def test_a_gemm_in_a_conv_layers_run_is_part_of_the_convolution() -> None:
    m, cand, conv = _net()
    got = conv_members(m, conv & cand, cand & ~conv, None)
    # ops 0-1: the conv layer's forward (a conv kernel, then a GEMM: one run); ops 8-9 its
    # backward; the linear layer's GEMMs (3, 5, 6) stay matmuls
    assert np.flatnonzero(got).tolist() == [0, 1, 8, 9]
    # no GEMM candidate: the conv kernels alone; no conv kernel: none
    assert np.flatnonzero(conv_members(m, conv & cand, np.zeros_like(cand), None)
                          ).tolist() == [0, 8]
    assert not conv_members(m, np.zeros_like(cand), cand & ~conv, None).any()


def test_with_framework_ops_the_launching_op_decides() -> None:
    m, cand, conv = _net()
    ops = {1: "aten::cudnn_convolution", 3: "aten::addmm", 9: "aten::mm"}
    # op 1's GEMM was launched by a convolution; op 9's by a matmul, though in the conv's run
    got = conv_members(m, conv & cand, cand & ~conv, ops)
    assert np.flatnonzero(got).tolist() == [0, 1, 8]


def _model(path: Path, tmp: Path) -> tuple[Analysis, RankAnalysis, StepModel]:
    a = analyze(Run(import_traces([path], tmp)), workers=1)
    ra = a.ranks[0]
    g = a.graph.rank(ra.rank)
    m = build_step_model(g, ra, step_costs(a.graph, g))
    assert m is not None
    return a, ra, untraced(m)


def test_tf32_on_a_conv_net_takes_the_gpu_time_its_fixed_trace_measured(
        tmp_path: Path) -> None:
    """cuDNN ran conv_fp32's fp32 convolutions partly as GEMM and FFT kernels (``xmma_gemm``,
    complex ``cgemm``); with TF32 each call changes algorithm (NHWC kernels between layout
    transposes), as the conv ratio of whole calls measures. Taking those GEMMs at the GEMM
    ratio (6.2x) predicted 2.41 ms of GPU work a step against 2.95 ms in the TF32 program's
    trace (the same H100 machine, 2026-11-27)."""
    a, ra, bare = _model(DATA / "h100_conv_fp32.pt.trace.json.gz", tmp_path / "base")
    tf32 = next(c for c in precision(a, ra, bare) if c.id == "tf32")
    predicted = replay(tf32.options[0].apply(bare)).gpu_busy_ns
    *_, fixed = _model(DATA / "h100_conv_fp32_tf32.pt.trace.json.gz", tmp_path / "tf32")
    measured = replay(fixed).gpu_busy_ns
    assert measured == pytest.approx(2.95e6, rel=0.01)
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)
