"""model.comm_remedies: the bucket split and the wave-loss contention (hand-computed)."""

from __future__ import annotations

import pytest

from stepscope.model.comm_remedies import best_split, contention


def test_one_wave_grids_lose_half_beside_nccl() -> None:
    # 132 blocks, 1 per SM: one wave on 132 SMs, two on the 108 left by 24 NCCL blocks
    assert contention([(132, 1, 100)], 132, 24) == pytest.approx(0.5)
    # many waves: 16384 blocks, 16 per SM: ceil(7.76) = 8 vs ceil(9.48) = 10 -> 0.2
    assert contention([(16384, 16, 100)], 132, 24) == pytest.approx(0.2)
    # time-weighted: (0.5 x 300 + 0.2 x 100) / 400
    assert contention([(132, 1, 300), (16384, 16, 100)], 132, 24) == pytest.approx(0.425)


def test_no_grids_fall_back_to_the_sm_share() -> None:
    assert contention([], 132, 33) == pytest.approx(0.25)


def test_best_split_of_the_planted_ddp_all_reduce() -> None:
    # 3.23 ms over one call, alpha 0.1 ms, c 0.39, compute to spare: bandwidth part 3.13 ms.
    # cost(k) = 0.1 + 3.13/k + 0.39 ((k-1) 0.1 + 3.13 (k-1)/k); k=7: 0.547 + 0.39 x 3.283
    sp = best_split(3.23e6, 1, 1e5, 0.39, 20e6)
    assert sp.buckets == 7
    assert sp.tail_ns == pytest.approx(1e5 + 3.13e6 / 7)
    assert sp.cost_ns == pytest.approx(1e5 + 3.13e6 / 7 + 0.39 * (6e5 + 3.13e6 * 6 / 7))


def test_not_splittable_keeps_its_calls() -> None:
    # 4 calls of 250 µs: tail = 100 + 600/4, the rest hidden at no contention
    sp = best_split(1e6, 4, 1e5, 0.0, 1e7, splittable=False)
    assert (sp.buckets, sp.tail_ns, sp.cost_ns) == (4, pytest.approx(2.5e5), pytest.approx(2.5e5))
