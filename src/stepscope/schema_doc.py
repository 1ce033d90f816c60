"""``docs/schema.md`` from the run schema (``stepscope.schema``): every table's columns, types,
units and meaning, the tables each kind of source must provide, the enumerations.

    python -m stepscope.schema_doc > docs/schema.md
"""

from __future__ import annotations

import pyarrow as pa

from stepscope.schema import CONTRACTS, GPU_ACTIVITY_TABLES, SCHEMA_VERSION, TABLES
from stepscope.schema_enums import ENUMS


def markdown() -> str:
    """``docs/schema.md``, generated from ``schema``'s specs
    (``python -m stepscope.schema_doc``)."""
    out = [
        "# Run schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated from `src/stepscope/schema.py` by "
        "`python -m stepscope.schema_doc > docs/schema.md`; a test keeps it in sync.",
        "",
        "A run is a folder: `manifest.json` plus `<table>/rank-<r>.parquet` for each table and "
        "rank. Times are integer nanoseconds on one clock per run (`manifest.clock`, "
        "`manifest.clock_offset_ns`). Unknown values are null. Names are dictionary-encoded.",
        "",
    ]
    for t in TABLES.values():
        out += [f"## `{t.name}`", "", t.doc, "", "| column | type | unit | null | meaning |",
                "|---|---|---|---|---|"]
        for c in t.columns:
            typ = "string (dict)" if pa.types.is_dictionary(c.type) else str(c.type)
            doc = c.doc.replace("|", "\\|")
            null = "yes" if c.nullable else "no"
            out.append(f"| `{c.name}` | {typ} | {c.unit} | {null} | {doc} |")
        out.append("")
    out += ["## Tables each source must provide", "",
            "Every row of GPU activity (" + ", ".join(f"`{t}`" for t in GPU_ACTIVITY_TABLES)
            + ") obliges a source to provide the tables below; a run that lacks one has a "
            "`missing_tables` diagnostic in its manifest; so does a communication (NCCL/RCCL) "
            "kernel for the tables under \"with communication\".", "",
            "| source | always | with GPU activity | with communication | from |",
            "|---|---|---|---|---|"]
    for k in CONTRACTS.values():
        out.append(f"| `{k.kind.value}` | {', '.join(f'`{t}`' for t in k.always) or '-'} | "
                   f"{', '.join(f'`{t}`' for t in k.with_gpu) or '-'} | "
                   f"{', '.join(f'`{t}`' for t in k.with_communication) or '-'} | {k.doc} |")
    out.append("")
    out += ["## Enumerations", ""]
    for enum_cls in ENUMS:
        out.append(f"- `{enum_cls.__name__}`: " + ", ".join(f"`{m.value}`" for m in enum_cls))
    return "\n".join(out) + "\n"



if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown())
