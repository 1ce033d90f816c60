"""``dataloader_workers``: more workers hide the input wait, and ``pin_memory=True`` makes the
batch's pageable copy pinned and non-blocking. A hand-built step with hand-computed replays."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from tests.model.test_stepmodel import model

from stepscope.model.stepmodel import catalog, replay
from stepscope.model.stepmodel.steps import CopyDir, HostKind, OpKind, StepModel, SyncRole

L, K, INPUT = HostKind.LAUNCH, HostKind.BLOCK, HostKind.INPUT
MIB = 1 << 20


def _loader_step(pageable: bool = True) -> StepModel:
    """A 100 us input wait, the batch's blocking pageable copy (1 MiB, 40 us on the GPU; the
    call 1 us after it), a launch (5 us host before it, 1 us call) of a 30 us kernel."""
    m = model([(0, INPUT, 0, 100_000), (0, K, 0, 1_000), (0, L, 5_000, 1_000)],
              [(2, 0, 40_000, 0), (3, 0, 30_000, 0)], wait={2: 0},
              role={2: SyncRole.BLOCKING_COPY})
    m = m.with_host(copy=np.array([0, 0, CopyDir.HTOD, 0], dtype=np.int8),
                    pageable=np.array([False, False, pageable, False]))
    m = m.with_ops(kind=np.array([OpKind.MEMCPY, OpKind.KERNEL], dtype=np.int8),
                   nbytes=np.array([MIB, 0], dtype=np.int64))
    return replace(m, step_ns=147_000, measured_ns=147_000)


def test_the_measured_loader_step() -> None:
    # input 100, copy 40 (the host waits for it: +1), 5 + launch; the kernel's 30 run while
    # the next input is read: 100 + 40 + 1 + 6 = 147 us
    assert replay(_loader_step()).step_ns == pytest.approx(147_000)


def test_batch_copies_are_the_pageable_copies_after_the_input_wait() -> None:
    assert catalog.batch_copies(_loader_step()).tolist() == [False, False, True, False]
    assert not catalog.batch_copies(_loader_step(pageable=False)).any()


def test_more_workers_with_pinned_batches(monkeypatch: Any) -> None:
    # pinned at 1 MiB / 4 us: the copy call costs 10 us (pageable.PINNED_CALL_NS) and no
    # longer waits. x4 hides the whole wait (147 / 4 < 47 of compute): the GPU sets the pace,
    # 4 + 30 = 34 us; x2 leaves 147 / 2 - 47 = 26.5 us of wait: the host, 26.5 + 10 + 5 + 1
    monkeypatch.setattr(catalog, "_pinned_bandwidth", lambda a, r: (MIB / 4_000, " (test)"))
    m = _loader_step()
    c = catalog.dataloader(None, None, m)  # type: ignore[arg-type]
    assert c is not None and c.id == "dataloader_workers"
    got = {o.name: replay(o.apply(m)).step_ns for o in c.options}
    assert got["x4"] == pytest.approx(34_000)
    assert got["x2"] == pytest.approx(42_500)
    assert any("pin_memory" in a for a in c.assumptions)
    # without a pageable batch copy nothing is pinned: the copy still holds the host
    # (40 + 1 + 6, then the kernel's 30 before the next copy can start)
    plain = _loader_step(pageable=False)
    c2 = catalog.dataloader(None, None, plain)  # type: ignore[arg-type]
    assert c2 is not None
    assert replay(c2.options[1].apply(plain)).step_ns == pytest.approx(76_000)
