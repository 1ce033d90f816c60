from __future__ import annotations

import numpy as np

from stepscope.analysis import intervals as iv


def a(*x: int) -> np.ndarray:
    return np.array(x, dtype=np.int64)


def test_union_merges_overlapping_and_touching_and_drops_empty() -> None:
    s, e = iv.union(a(10, 0, 5, 30, 40), a(20, 5, 12, 30, 50))
    # [0,5) touches [5,12) which overlaps [10,20) -> [0,20); [30,30) empty; [40,50)
    assert s.tolist() == [0, 40]
    assert e.tolist() == [20, 50]
    assert iv.total(a(10, 0, 5, 30, 40), a(20, 5, 12, 30, 50)) == 30


def test_union_nested() -> None:
    s, e = iv.union(a(0, 2, 3), a(100, 5, 4))
    assert (s.tolist(), e.tolist()) == ([0], [100])


def test_overlap_with_windows() -> None:
    s, e = iv.union(a(0, 40), a(20, 50))
    # windows: [10,45) covers 10 of the first and 5 of the second; [20,40) none; [0,100) all 30
    got = iv.overlap_with_windows(s, e, a(10, 20, 0, 60), a(45, 40, 100, 70))
    assert got.tolist() == [15, 0, 30, 0]


def test_subtract() -> None:
    s, e = iv.subtract(a(0, 50), a(40, 60), a(10, 35, 55), a(20, 52, 100))
    # [0,40) minus [10,20),[35,52) -> [0,10),[20,35); [50,60) minus [35,52),[55,100) -> [52,55)
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 35), (52, 55)]


def test_gaps_and_assign() -> None:
    s, e = iv.gaps(a(10, 30), a(20, 40), 0, 50)
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 30), (40, 50)]
    idx = iv.assign_to_windows(a(-1, 0, 9, 10, 25), a(0, 20), a(10, 30))
    assert idx.tolist() == [-1, 0, 0, -1, 1]


def test_union_random_matches_bruteforce() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 1000, 200)
    e = s + rng.integers(0, 30, 200)
    covered = np.zeros(1100, dtype=bool)
    for x, y in zip(s, e):
        covered[x:y] = True
    assert iv.total(s, e) == covered.sum()
    us, ue = iv.union(s, e)
    w = iv.overlap_with_windows(us, ue, a(0, 100, 500), a(100, 600, 1100))
    assert w.tolist() == [covered[0:100].sum(), covered[100:600].sum(), covered[500:1100].sum()]


def test_subtract_and_intersect_random_match_bruteforce() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n, m = rng.integers(0, 40, 2)
        a_s = rng.integers(0, 500, n)
        a_e = a_s + rng.integers(0, 40, n)
        b_s = rng.integers(0, 500, m)
        b_e = b_s + rng.integers(0, 40, m)
        ca = np.zeros(600, dtype=bool)
        cb = np.zeros(600, dtype=bool)
        for x, y in zip(a_s, a_e):
            ca[x:y] = True
        for x, y in zip(b_s, b_e):
            cb[x:y] = True
        for got, want in ((iv.subtract(a_s, a_e, b_s, b_e), ca & ~cb),
                          (iv.intersect(a_s, a_e, b_s, b_e), ca & cb)):
            s, e = got
            assert (s[1:] > e[:-1]).all() and (e > s).all()  # disjoint, sorted, non-empty
            cover = np.zeros(600, dtype=bool)
            for x, y in zip(s, e):
                cover[x:y] = True
            assert (cover == want).all()
