"""slow_collectives: large collectives far below the link (builder times in µs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.base import Finding
from stepscope.advisor.engine import advise
from stepscope.advisor.rules.slow_collectives import RULE
from stepscope.analysis import analyze
from stepscope.model.confidence import Confidence
from stepscope.model.links import link_of
from stepscope.store.run import Run

MIB64 = 64 << 20


def _findings(run: Run) -> tuple[Finding, ...]:
    return advise(analyze(run), [RULE]).findings


def _plant(b: Any, transfer: float, nbytes: int = MIB64) -> None:
    """6 steps of 5000 µs on 2 H100 ranks: gemm 0-2000, then an all-reduce of ``nbytes``
    that takes ``transfer`` µs on both ranks."""
    for i in range(6):
        t0 = i * 5000
        for r in (0, 1):
            b.step(t0, 5000, rank=r, step=i)
            b.kernel("gemm", t0, 2000, rank=r)
            b.call("all_reduce", t0 + 2000, transfer, rank=r, nbytes=nbytes)


def test_fires_below_half_the_reachable_bandwidth(builder: Any, tmp_path: Path) -> None:
    # 64 MiB in 2000 µs: 33.6 GB/s bus bandwidth (factor 1 on 2 ranks). The H100's NVLink
    # (datasheet) is 450 GB/s per direction, NCCL reaches 0.7 of it: 315 GB/s, at which the
    # transfer takes 67108864 / 315 = 213.0 µs: 1787.0 µs less per step.
    _plant(builder, 2000)
    (f,) = _findings(builder.build(tmp_path / "run"))
    assert f.id == "slow_collectives"
    assert f.est_saving_ms == pytest.approx((2000 - MIB64 / 315 / 1000) / 1000, rel=1e-3)
    assert f.title.startswith("Collectives reach 34 GB/s bus bandwidth, 7% of the NVLink link")
    assert "NVLink 450 GB/s per direction (the GPU's datasheet" in f.evidence[1]
    assert f.confidence is Confidence.LOW  # the link is the datasheet's, not measured
    assert "NCCL_DEBUG=INFO" in f.fix.pytorch


def test_fast_collectives_do_not_fire(builder: Any, tmp_path: Path) -> None:
    _plant(builder, 300)  # 224 GB/s: above half of 315
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_small_messages_are_not_judged_by_bandwidth(builder: Any, tmp_path: Path) -> None:
    _plant(builder, 2000, nbytes=1 << 20)  # 1 MiB: latency-bound
    assert _findings(builder.build(tmp_path / "run")) == ()


def test_measured_link_wins_over_the_datasheet() -> None:
    row = {"name": "NVIDIA H100 80GB HBM3", "nvlink_gbs": 300.0, "nvlink_links": 12}
    link = link_of([row])
    assert link is not None and link.measured and link.gbs == 300.0
    sheet = link_of([{"name": "NVIDIA H100 80GB HBM3"}])
    assert sheet is not None and not sheet.measured and sheet.gbs == 450.0
    pcie = link_of([{"name": "NVIDIA L4", "nvlink_links": 0, "pcie_gbs": 31.5}])
    assert pcie is not None and pcie.kind == "PCIe" and pcie.gbs == 31.5
    assert link_of([{"name": "NVIDIA L4"}]) is None
