"""Print what a captured run holds (rows per table per rank, top kernels, API calls, copies,
NVTX ranges, GPU backend settings, diagnostics, the share of kernels, copies and memsets whose
call was recorded): the check of a GPU capture run.

    python benchmarks/capture/inspect_run.py RUN [RUN ...]
"""

from __future__ import annotations

import json
import sys

from stepscope.schema import TABLE_NAMES
from stepscope.store.run import Run


def show(path: str) -> dict[str, object]:
    run = Run(path)
    out: dict[str, object] = {"run": path}
    rows = {}
    for t in TABLE_NAMES:
        tab = run.table(t)
        if tab is not None and tab.num_rows:
            rows[t] = tab.num_rows
    out["rows"] = rows
    q = run.query
    if rows.get("kernels"):
        out["top_kernels"] = q("select name, count(*) n, sum(dur_ns)/1e6 ms, any_value(grid_x) gx, "
                               "any_value(block_x) bx, any_value(registers) regs from kernels "
                               "group by name order by ms desc limit 6").to_pylist()
        out["kernel_span_ms"] = q("select (max(ts_ns+dur_ns)-min(ts_ns))/1e6 from kernels").to_pylist()
    if rows.get("api_calls"):
        out["api"] = q("select domain, name, kind, count(*) n from api_calls group by all "
                       "order by n desc limit 12").to_pylist()
    if rows.get("api_calls"):  # GPU records whose launching/issuing call was recorded
        out["with_call"] = {t: q(f"select avg(case when correlation in (select correlation from "
                                 f"api_calls) then 1.0 else 0.0 end), count(*) from {t}").to_pylist()
                            for t in ("kernels", "memcpy", "memset") if rows.get(t)}
    if rows.get("memcpy"):
        out["memcpy"] = q("select kind, src_kind, dst_kind, count(*), sum(bytes) from memcpy "
                          "group by all").to_pylist()
    if rows.get("sync"):
        out["sync"] = q("select kind, count(*), sum(dur_ns)/1e6 from sync group by all").to_pylist()
    if rows.get("annotations"):
        out["annotations"] = q("select name, source, count(*), avg(dur_ns)/1e3 us from annotations "
                               "group by all order by 3 desc limit 8").to_pylist()
    if rows.get("steps"):
        out["steps"] = q("select count(*), avg(dur_ns)/1e6 from steps").to_pylist()
    if rows.get("kernels") and rows.get("steps"):
        out["clock_check"] = q("select (select min(ts_ns) from kernels) - (select min(ts_ns) from steps), "
                               "(select max(ts_ns) from kernels) - (select max(ts_ns+dur_ns) from steps)").to_pylist()
    m = run.manifest
    out["source"] = m.source.tool
    out["gpu"] = {k: v.get("gpu") for k, v in (m.settings.get("ranks") or {}).items()}
    out["overhead"] = getattr(m, "overhead", None)
    out["diagnostics"] = [f"{d.level} {d.code}: {d.message}" for d in m.diagnostics]
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(show(p), indent=1, default=str))
