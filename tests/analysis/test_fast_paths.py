"""The shortcuts taken for speed give what the plain definitions give, on random inputs: the
innermost/outermost container (against a brute force over every container), dense pair ids
(against ``np.unique``), the correlation index (against ``np.unique``) and ``str_in`` on
dictionary columns (against the column cast to strings)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import intervals as iv
from stepscope.analysis.graph import CorrelationIndex
from stepscope.analysis.launches import str_in


def _innermost_brute(cs, ce, qs, qe):  # type: ignore[no-untyped-def]
    out = []
    for s, e in zip(qs.tolist(), qe.tolist()):
        hold = [j for j in range(cs.size) if cs[j] <= s and ce[j] >= e]
        # the one that starts last; ties: the shortest; then the later in (start, -end) order
        best = max(hold, key=lambda j: (cs[j], -ce[j], j), default=-1) if hold else -1
        out.append(best)
    return np.array(out, dtype=np.int64)


def test_innermost_containing_matches_a_brute_force() -> None:
    rng = np.random.default_rng(7)
    for trial in range(400):
        n, q, span = int(rng.integers(0, 25)), int(rng.integers(0, 25)), int(rng.integers(1, 40))
        cs = rng.integers(0, span, n)
        ce = cs + rng.integers(0, span, n)
        if trial % 2:  # properly nested ops, as a thread's call stack makes them
            cs, ce = np.sort(cs), ce
        qs = rng.integers(-3, span + 3, q)
        qe = qs + rng.integers(0, 8, q)
        got = iv.innermost_containing(cs, ce, qs, qe)
        want = _innermost_brute(cs, ce, qs, qe)
        if n == 0:
            assert (got == -1).all()
            continue
        # the same container, or one with the same bounds (ties between equal intervals)
        same = (got == want) | ((got >= 0) & (want >= 0)
                                & (cs[np.maximum(got, 0)] == cs[np.maximum(want, 0)])
                                & (ce[np.maximum(got, 0)] == ce[np.maximum(want, 0)]))
        assert same.all(), (trial, cs, ce, qs, qe, got, want)


def test_group_ids_are_np_unique_ranks() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        keys = [(rng.integers(-3, 4, n) * int(rng.choice([1, 10**12])),
                 rng.integers(0, int(rng.integers(1, 5)), n))
                for n in rng.integers(1, 30, int(rng.integers(1, 4)))]
        got = np.concatenate(iv.group_ids(*keys))
        a = np.concatenate([k[0] for k in keys])
        b = np.concatenate([k[1] for k in keys])
        _, ia = np.unique(a, return_inverse=True)
        _, ib = np.unique(b, return_inverse=True)
        _, want = np.unique(ia * (ib.max() + 1) + ib, return_inverse=True)
        assert got.dtype == np.int64
        assert np.array_equal(got, want.reshape(-1))


def test_correlation_index_keeps_the_first_row_of_each_key() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        corr = rng.integers(-3, int(rng.integers(1, 40)), int(rng.integers(0, 40))).astype(np.int64)
        got = CorrelationIndex.of(corr)
        ok = corr >= 0
        keys, first = np.unique(corr[ok], return_index=True)
        assert np.array_equal(got.keys, keys)
        assert np.array_equal(got.rows, np.flatnonzero(ok)[first])


def test_str_in_on_dictionary_columns_matches_the_strings() -> None:
    rng = np.random.default_rng(11)
    words = ["launch", "sync", "copy", "x"]
    for _ in range(300):
        chunks = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(0, 20))
            if rng.random() < 0.3:  # a null in the dictionary itself, and null codes
                codes = pa.array([None if rng.random() < 0.2 else int(rng.integers(0, 3))
                                  for _ in range(n)], type=pa.int32())
                chunks.append(pa.DictionaryArray.from_arrays(codes, pa.array(["sync", None, "x"])))
            else:
                vals = [None if rng.random() < 0.2 else str(rng.choice(words)) for _ in range(n)]
                chunks.append(pa.array(vals, type=pa.string()).dictionary_encode())
        t = pa.table({"k": pa.chunked_array(chunks, type=pa.dictionary(pa.int32(), pa.string()))})
        values = tuple(str(w) for w in rng.choice(words, int(rng.integers(1, 3)), replace=False))
        plain = pc.is_in(t.column("k").cast(pa.string()), value_set=pa.array(values))
        want = np.asarray(pc.fill_null(plain, False).to_numpy(zero_copy_only=False), dtype=bool)
        assert np.array_equal(str_in(t, "k", values), want)
