"""A :class:`~stepscope.compare.Diff` as one Arrow table: a row per thing that changed, the
step first (``kind`` = step, category, kernel, op, finding), per steady step, largest change
first within each kind; the verdict and its reason ride in the schema metadata
(``stepscope.verdict``, ``stepscope.reason``, ``stepscope.note``)."""

from __future__ import annotations

import pyarrow as pa

from stepscope.compare import Diff
from stepscope.notebook.tables import NOTE_KEY

DIFF = pa.schema([("kind", pa.string()), ("name", pa.string()), ("base_ms", pa.float64()),
                  ("new_ms", pa.float64()), ("delta_ms", pa.float64()),
                  ("change_pct", pa.float64()), ("status", pa.string())])
VERDICT_KEY = b"stepscope.verdict"
REASON_KEY = b"stepscope.reason"


def _pct(base: float, new: float) -> float | None:
    return 100.0 * (new - base) / base if base > 0 else None


def diff_table(d: Diff) -> pa.Table:
    """The rows of ``d`` (module docstring). The step row holds the medians and the
    Hodges-Lehmann shift (``delta_ms``) that the verdict is about; the other rows are means
    per steady step."""
    t = d.step
    rows = [{"kind": "step", "name": "step", "base_ms": t.base_ms, "new_ms": t.new_ms,
             "delta_ms": t.shift_ms, "change_pct": _pct(t.base_ms, t.base_ms + t.shift_ms),
             "status": t.verdict.value}]
    rows += [{"kind": "category", "name": c.name, "base_ms": c.base_ms, "new_ms": c.new_ms,
              "delta_ms": c.delta_ms, "change_pct": _pct(c.base_ms, c.new_ms), "status": ""}
             for c in d.categories]
    for kind, changes in (("kernel", d.kernels), ("op", d.ops)):
        for ch in changes:
            status = ch.matched_by or ("new" if ch.base is None else "gone")
            rows.append({"kind": kind, "name": ch.name, "base_ms": ch.base_ms,
                         "new_ms": ch.new_ms, "delta_ms": ch.delta_ms,
                         "change_pct": _pct(ch.base_ms, ch.new_ms), "status": status})
    for f in d.findings:
        b = f.base.est_saving_ms if f.base else 0.0
        n = f.new.est_saving_ms if f.new else 0.0
        rows.append({"kind": "finding", "name": f.id, "base_ms": b, "new_ms": n,
                     "delta_ms": f.delta_saving_ms, "change_pct": _pct(b, n),
                     "status": f.status})
    meta = {VERDICT_KEY: t.verdict.value.encode(), REASON_KEY: t.reason.encode(),
            NOTE_KEY: (f"{d.alignment}; findings: est_saving_ms per step").encode()}
    return pa.Table.from_pylist(rows, schema=DIFF).replace_schema_metadata(meta)
