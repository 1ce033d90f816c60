"""Which recorded runs have every CUDA call's thread in their threads table (system thread ids
on both sides); prints one line per run folder under the given folder."""
import sys
from pathlib import Path

from stepscope.store.run import Run

for d in sorted(Path(sys.argv[1]).glob("*")):
    if not (d / "manifest.json").exists():
        continue
    r = Run(d)
    a = set(r.query("SELECT DISTINCT tid FROM api_calls").column(0).to_pylist()) if r.table("api_calls").num_rows else set()
    t = {x["tid"]: x["name"] for x in r.table("threads").to_pylist()}
    print(d.name, "api tids", len(a), "named", len(a & set(t)), [t.get(x) for x in sorted(a)][:6], "devices", r.table("devices").num_rows)
