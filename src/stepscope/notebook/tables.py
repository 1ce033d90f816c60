"""A report as Arrow tables, one per question (steps, breakdown, kernels, copies, syncs,
collectives, findings, remedies, plan): the rows of the JSON report (``stepscope.report/1``,
docs/report-json.md; the breakdown from the analysis itself) with fixed schemas, so that a run
without copies still has a ``copies`` table with every column. Times in ms: means per steady
step in the breakdown, totals over the steady steps in kernels, copies and syncs; a table that
has a caveat carries it in its schema metadata under ``stepscope.note`` (:func:`note_of`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from stepscope.analysis.breakdown import CATEGORIES
from stepscope.reporters.report import Report, fix_for

NOTE_KEY = b"stepscope.note"
_F, _I, _S, _B = pa.float64(), pa.int64(), pa.string(), pa.bool_()
_LI = pa.list_(pa.int64())

STEPS = pa.schema([("rank", _I), ("index", _I), ("number", _I), ("start_ns", _I),
                   ("end_ns", _I), ("wall_ms", _F), ("marker_wall_ms", _F), ("gpu_busy_ms", _F),
                   ("steady", _B), ("note", _S)] + [(f"{c}_ms", _F) for c in CATEGORIES])
BREAKDOWN = pa.schema([("rank", _I), ("category", _S), ("ms", _F), ("pct", _F)])
KERNELS = pa.schema([("rank", _I), ("name", _S), ("calls", _I), ("total_ms", _F),
                     ("mean_ms", _F), ("median_ms", _F), ("min_ms", _F), ("max_ms", _F),
                     ("share", _F), ("grid", _LI), ("block", _LI), ("registers", _I),
                     ("shared_memory", _I), ("occupancy", _F), ("occupancy_limiter", _S),
                     ("sm_coverage", _F), ("waves", _F), ("tensor_cores", _B),
                     ("precision", _S), ("category", _S)])
COPIES = pa.schema([("rank", _I), ("direction", _S), ("count", _I), ("bytes", _I), ("ms", _F),
                    ("bandwidth_gbs", _F), ("median_bytes", _F), ("pageable_count", _I),
                    ("pageable_bytes", _I), ("pinned_count", _I), ("pinned_bytes", _I),
                    ("async_calls", _I), ("host_blocking", _I), ("tiny_count", _I),
                    ("overlap_ms", _F), ("exposed_ms", _F), ("steps", _I)])
SYNCS = pa.schema([("rank", _I), ("call_site", _S), ("kind", _S), ("api", _S), ("frame", _S),
                   ("op", _S), ("outer_op", _S), ("count", _I), ("blocked_ms", _F),
                   ("steps", _I)])
COLLECTIVES = pa.schema([("op", _S), ("name", _S), ("pg", _S), ("bytes", _I), ("ranks", _I),
                         ("calls", _I), ("transfer_ms", _F), ("wait_ms", _F),
                         ("busbw_gbs", _F)])
FINDINGS = pa.schema([("rank", _I), ("id", _S), ("category", _S), ("severity", _S),
                      ("title", _S), ("est_saving_ms", _F), ("est_saving_pct", _F),
                      ("confidence", _S), ("fix", _S), ("method", _S),
                      ("evidence", pa.list_(_S)), ("note", _S), ("docs", _S)])
_OPTION = pa.struct([("name", _S), ("title", _S), ("predicted_step_ms", _F),
                     ("est_saving_ms", _F), ("assumptions", pa.list_(_S))])
REMEDIES = pa.schema([("rank", _I), ("id", _S), ("title", _S), ("finding_ids", pa.list_(_S)),
                      ("predicted_step_ms", _F), ("est_saving_ms", _F), ("est_saving_pct", _F),
                      ("option", _S), ("options", pa.list_(_OPTION)),
                      ("evidence", pa.list_(_S)), ("assumptions", pa.list_(_S))])
PLAN = pa.schema([("rank", _I), ("measured_ms", _F), ("predicted_step_ms", _F),
                  ("est_saving_ms", _F), ("est_saving_pct", _F), ("remedy_ids", pa.list_(_S)),
                  ("options", pa.list_(_S))])
PLAN_SUBSETS = pa.schema([("remedy_ids", pa.list_(_S)), ("options", pa.list_(_S)),
                          ("predicted_step_ms", _F), ("est_saving_ms", _F),
                          ("est_saving_pct", _F)])
REMEDIES_NOTE = ("no remedies in this report: this stepscope version predicts none "
                 "(findings() has the diagnosis and each finding's fix)")


def note_of(table: pa.Table) -> str:
    """The caveat a table carries (schema metadata ``stepscope.note``), "" when none."""
    meta = table.schema.metadata or {}
    return bytes(meta.get(NOTE_KEY, b"")).decode()


def _table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema, note: str = "") -> pa.Table:
    t = pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)
    return t.replace_schema_metadata({NOTE_KEY: note.encode()}) if note else t


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def steps(d: Mapping[str, Any]) -> pa.Table:
    rows = []
    for s in d["steps"]:
        row = {**s, "marker_wall_ms": s["marker"]["wall_ms"]}
        row.update({f"{c}_ms": s["breakdown"].get(c, 0.0) for c in CATEGORIES})
        rows.append(row)
    return _table(rows, STEPS, "wall_ms: the step's window on the GPU timeline; "
                               "<category>_ms: the step-time breakdown (sums to wall_ms)")


def breakdown(report: Report) -> pa.Table:
    rows = []
    for ra in report.analysis.ranks:
        total = sum(ra.breakdown.mean_ms.get(c, 0.0) for c in CATEGORIES)
        for c in CATEGORIES:
            ms = float(ra.breakdown.mean_ms.get(c, 0.0))
            rows.append({"rank": ra.rank, "category": c, "ms": ms,
                         "pct": 100.0 * ms / total if total else 0.0})
    return _table(rows, BREAKDOWN, "mean ms per steady step; the categories of a rank sum to "
                                   "its mean step (docs/analysis.md)")


def kernels(d: Mapping[str, Any]) -> pa.Table:
    return _table(d["kernels"], KERNELS, "top kernels by time over the steady steps")


def copies(d: Mapping[str, Any]) -> pa.Table:
    rows = []
    for rank, c in d["copies"].items():
        for x in c["directions"]:
            rows.append({
                "rank": int(rank), "direction": x["direction"], "count": x["count"],
                "bytes": x["bytes"], "ms": _ms(x["ns"]), "bandwidth_gbs": x["bandwidth_gbs"],
                "median_bytes": x["median_bytes"], "pageable_count": x["pageable"]["count"],
                "pageable_bytes": x["pageable"]["bytes"], "pinned_count": x["pinned"]["count"],
                "pinned_bytes": x["pinned"]["bytes"], "async_calls": x["api_async"],
                "host_blocking": x["host_blocking"], "tiny_count": x["tiny_count"],
                "overlap_ms": _ms(x["overlap_ns"]), "exposed_ms": _ms(x["exposed_ns"]),
                "steps": c["n_steps"]})
    return _table(rows, COPIES, "per direction, over the steady steps (steps: how many)")


def syncs(d: Mapping[str, Any]) -> pa.Table:
    rows = [{"rank": int(rank), "call_site": x["name"], "kind": x["kind"], "api": x["api"],
             "frame": x["frame"], "op": x["op"], "outer_op": x["outer_op"], "count": x["count"],
             "blocked_ms": _ms(x["blocked_ns"]), "steps": s["n_steps"]}
            for rank, s in d["syncs"].items() for x in s["call_sites"]]
    return _table(rows, SYNCS, "host-device sync points per call site, over the steady steps, "
                               "largest blocked time first")


def collectives(d: Mapping[str, Any]) -> pa.Table:
    c = d.get("collectives")
    if not c:
        return _table([], COLLECTIVES, "collectives are compared across ranks: this run has "
                                        "one rank (its communication is the breakdown's "
                                        "communication_ms)")
    return _table(c["groups"], COLLECTIVES, "per kind of collective: median transfer, median "
                                            "wait, median bus bandwidth")


def findings(report: Report, d: Mapping[str, Any]) -> pa.Table:
    rows = []
    for f, fd in zip(report.advice.findings, d["findings"]):
        rows.append({**fd, "rank": fd.get("where", {}).get("rank"),
                     "fix": fix_for(f.fix, report.frameworks)})
    return _table(rows, FINDINGS, "ranked by estimated saving per step; fix: for the run's "
                                  "framework (all of them: analyze().advice)")


def remedies(d: Mapping[str, Any]) -> pa.Table:
    """The report's remedies (``remedies`` of the JSON report: each fix replayed alone on the
    step model), where this version predicts them; else an empty table with a note."""
    given = d.get("remedies")
    if given is None:
        return _table([], REMEDIES, REMEDIES_NOTE)
    if not given:
        return _table([], REMEDIES, "no remedy predicted for this run (docs/remedies.md)")
    return _table(given, REMEDIES, "each remedy replayed alone on the step model of the "
                                   "slowest rank; their savings do not add: plan()")


def plan(d: Mapping[str, Any]) -> pa.Table:
    """The plan: every remedy that helps, replayed together (one row; empty, with a note,
    where there is none)."""
    given = d.get("plan")
    if given is None:
        why = REMEDIES_NOTE if "plan" not in d else "no plan for this run (no remedy helps)"
        return _table([], PLAN, why)
    return _table([given], PLAN, "the remedies replayed together (savings do not add)")


def plan_subsets(d: Mapping[str, Any]) -> pa.Table:
    """The plan restricted to subsets of its remedies (``plan.subsets``: every pair of the
    remedies that help, then the plan less one, two...), a row each; empty, with a note,
    where the report has none."""
    given = d.get("plan")
    if given is None:
        why = REMEDIES_NOTE if "plan" not in d else "no plan for this run (no remedy helps)"
        return _table([], PLAN_SUBSETS, why)
    subs = given.get("subsets")
    if subs is None:
        return _table([], PLAN_SUBSETS, "this report's plan has no subsets (an older "
                                        "stepscope version)")
    return _table(subs, PLAN_SUBSETS, "each subset of remedies replayed together on the step "
                                      "model (savings do not add)")
