from __future__ import annotations

from pathlib import Path

from stepscope import schema

DOC = Path(__file__).parent.parent / "docs" / "schema.md"


def test_docs_schema_is_generated_from_schema_py() -> None:
    assert DOC.read_text() == schema.markdown(), (
        "docs/schema.md is stale: run `python -m stepscope.schema > docs/schema.md`")


def test_every_table_has_rank_first_and_times_in_ns() -> None:
    for t in schema.TABLES.values():
        assert t.columns[0].name == "rank"
        for c in t.columns:
            if c.name.endswith("_ns"):
                assert c.unit == "ns" and str(c.type) == "int64", (t.name, c.name)
