"""The kernel launches Nsight Compute profiled (``kernel_metrics``), each joined to the run's
kernels by name and launch configuration: what the kernel rules (``advisor/rules/kernel_*``)
and the report's kernel section read.

The join: a profiled launch matches the run's launches of the same kernel name (compared with
spaces and a leading ``void`` removed, as demanglers differ) and the same grid and block; when
no launch has that configuration, the same name alone; when the names differ in form (ncu's
function name against a full signature), the same base name (the function's last name,
without namespaces, template arguments or parameters) and configuration. Its time per step is
the matched launches' time in the steady steps over the number of steady steps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import assign_to_windows
from stepscope.analysis.mangled import mangled_function
from stepscope.schema_ncu import NCU_COLUMNS

METRICS = tuple(c for c, _, _, _ in NCU_COLUMNS)
# warp stall reasons, by family, the first with values used (never mixed: they overlap):
# cycles per issued instruction (ncu's Warp State section), then PC samples (Source Counters)
_STALLS = (
    re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>[a-z0-9_]+?)_per_issue_active"
               r"\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(?P<reason>[a-z0-9_]+?)\.ratio$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(?P<reason>[a-z0-9_]+?)$"),
)


@dataclass(frozen=True)
class HotLine:
    """A source line of a profiled kernel and its share of the kernel's warp-stall samples."""

    file: str
    line: int
    source: str | None
    share: float


HOT_LINES = 5


@dataclass(frozen=True)
class KernelProfile:
    """One profiled launch and what the run says of its kernel."""

    rank: int
    id: int
    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    metrics: Mapping[str, float]  # the typed columns of kernel_metrics that have a value
    stalls: tuple[tuple[str, float], ...]  # stall reason -> share of stalled cycles, largest first
    ms_per_step: float | None  # the run's time in this kernel per steady step (None: unmatched)
    launches_per_step: float | None
    match: str  # "name and configuration", "name", "base name", "" (not in the run)
    hot_lines: tuple[HotLine, ...] = ()  # from ncu's source page, most samples first

    def get(self, metric: str) -> float | None:
        return self.metrics.get(metric)

    @property
    def dur_ns(self) -> float:
        return self.metrics.get("dur_ns", 0.0)


def signature_key(name: str) -> str:
    """A kernel name compared across demanglers: no spaces, no leading ``void``."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    return re.sub(r"\s+", "", s)


def base_name(name: str) -> str:
    """``void ns::copy<4>(const char*, int)`` -> ``copy``; a mangled name (``_Z4copyILi4EEvPKci``)
    -> its function name too (``analysis.mangled``)."""
    s = name.strip()
    mangled = mangled_function(s)
    if mangled is not None:
        return mangled
    if s.startswith("void "):
        s = s[5:]
    depth, out = 0, []
    for ch in s:  # drop template arguments and parameters
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    flat = "".join(out).strip().split()
    last = flat[-1] if flat else s
    return last.rsplit("::", 1)[-1]


def _stalls(values: pa.Table) -> dict[int, tuple[tuple[str, float], ...]]:
    """Launch id -> its stall reasons as shares of the stalled cycles, largest first (one
    pass over the long table: only the stall metrics are looked at)."""
    if values.num_rows == 0:
        return {}
    names = [str(m) for m in pc.unique(values.column("metric").combine_chunks()
                                       .cast(pa.string())).to_pylist()]
    wanted = [m for m in names if any(f.match(m) for f in _STALLS)]
    if not wanted:
        return {}
    sel = values.filter(pc.is_in(values.column("metric").cast(pa.string()),
                                 value_set=pa.array(wanted, pa.string())))
    per: dict[int, list[tuple[str, float]]] = {}
    for i, metric, v in zip(sel.column("id").to_pylist(), sel.column("metric").to_pylist(),
                            sel.column("value").to_pylist()):
        if v is not None and math.isfinite(v) and v > 0:
            per.setdefault(int(i), []).append((str(metric), float(v)))
    return {i: _reasons(pairs) for i, pairs in per.items()}


def _reasons(pairs: list[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    got: dict[str, float] = {}
    for family in _STALLS:
        for metric, v in pairs:
            m = family.match(metric)
            if m is None:
                continue
            reason = m.group("reason")
            if reason in ("selected", "not_issued") or reason.endswith("_not_issued"):
                continue  # 'selected' is issuing, not a stall
            got[reason] = got.get(reason, 0.0) + v
        if got:
            break
    total = sum(got.values())
    if total <= 0:
        return ()
    return tuple(sorted(((r, v / total) for r, v in got.items()), key=lambda x: -x[1]))


@dataclass(frozen=True)
class _RunKernels:
    sig: list[str]
    base: list[str]
    cfg: list[tuple[int, ...] | None]
    dur: np.ndarray
    n_steps: int


def _run_kernels(g: StepGraph, windows: Sequence[tuple[int, int]]) -> _RunKernels | None:
    k = g.table("kernels")
    if k.num_rows == 0 or not windows:
        return None
    starts = np.array(sorted(w[0] for w in windows), dtype=np.int64)
    ends = np.array([e for _, e in sorted(windows)], dtype=np.int64)
    ts = np.asarray(k.column("ts_ns").to_numpy(), dtype=np.int64)
    keep = assign_to_windows(ts, starts, ends) >= 0
    k = k.filter(pa.array(keep))
    names = [str(x) for x in k.column("name").to_pylist()]
    cols = [k.column(c).to_pylist() for c in ("grid_x", "grid_y", "grid_z",
                                              "block_x", "block_y", "block_z")]
    cfg = [None if any(v is None for v in row) else tuple(int(v) for v in row)
           for row in zip(*cols)] if names else []
    return _RunKernels(sig=[signature_key(n) for n in names], base=[base_name(n) for n in names],
                       cfg=cfg, dur=np.asarray(k.column("dur_ns").to_numpy(), dtype=np.float64),
                       n_steps=len(windows))


def _match(rk: _RunKernels, name: str, cfg: tuple[int, ...] | None
           ) -> tuple[np.ndarray, str]:
    sig = signature_key(name)
    same = np.array([s == sig for s in rk.sig], dtype=bool)
    if same.any():
        both = same & np.array([c == cfg for c in rk.cfg], dtype=bool)
        return (both, "name and configuration") if both.any() else (same, "name")
    base = base_name(name)
    sb = np.array([b == base for b in rk.base], dtype=bool)
    both = sb & np.array([c == cfg for c in rk.cfg], dtype=bool)
    if both.any():
        return both, "base name"
    return np.zeros(len(rk.sig), dtype=bool), ""


def kernel_profiles(g: StepGraph, steady: Sequence[tuple[int, int]] = ()
                    ) -> tuple[KernelProfile, ...]:
    """Every profiled launch of the graph's rank(s), longest first, joined to the run's
    kernels in the ``steady`` step windows (start, end ns)."""
    return g.memo(("kernel_profiles", tuple(steady)), lambda: _profiles(g, steady))


def _profiles(g: StepGraph, steady: Sequence[tuple[int, int]]) -> tuple[KernelProfile, ...]:
    t = g.table("kernel_metrics")
    if t.num_rows == 0:
        return ()
    stalls = _stalls(g.table("kernel_metric_values"))
    hot = _hot_lines(g.table("kernel_source_lines"))
    rk = _run_kernels(g, steady)
    rows = t.to_pylist()
    out = []
    for r in rows:
        grid = _dims(r, "grid")
        block = _dims(r, "block")
        metrics = {c: float(r[c]) for c in METRICS
                   if r.get(c) is not None and math.isfinite(float(r[c]))}
        ms = per = None
        how = ""
        if rk is not None:
            cfg = (grid + block) if grid and block else None
            sel, how = _match(rk, str(r["name"]), cfg)
            if how:
                ms = float(rk.dur[sel].sum()) / 1e6 / rk.n_steps
                per = float(sel.sum()) / rk.n_steps
        out.append(KernelProfile(
            rank=int(r["rank"]), id=int(r["id"]), name=str(r["name"]), grid=grid, block=block,
            metrics=metrics, stalls=stalls.get(int(r["id"]), ()), ms_per_step=ms,
            launches_per_step=per, match=how, hot_lines=hot.get(base_name(str(r["name"])), ())))
    out.sort(key=lambda p: (-(p.ms_per_step or 0.0), -p.dur_ns, p.id))
    return tuple(out)


def _hot_lines(t: pa.Table) -> dict[str, tuple[HotLine, ...]]:
    """Kernel base name -> its ``HOT_LINES`` source lines with the most samples."""
    out: dict[str, list[HotLine]] = {}
    for r in t.to_pylist():
        if r["share"] is None or r["share"] <= 0:
            continue
        out.setdefault(base_name(str(r["kernel"])), []).append(
            HotLine(file=str(r["file"] or ""), line=int(r["line"]), source=r["source"],
                    share=float(r["share"])))
    return {k: tuple(sorted(v, key=lambda h: -h.share)[:HOT_LINES]) for k, v in out.items()}


def _dims(r: Mapping[str, object], axis: str) -> tuple[int, int, int] | None:
    v = [r.get(f"{axis}_{c}") for c in "xyz"]
    if any(x is None for x in v):
        return None
    return int(v[0]), int(v[1]), int(v[2])  # type: ignore[call-overload]
