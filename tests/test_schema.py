from __future__ import annotations

from stepscope import schema


def test_every_table_has_rank_first_and_times_in_ns() -> None:
    for t in schema.TABLES.values():
        assert t.columns[0].name == "rank"
        for c in t.columns:
            if c.name.endswith("_ns"):
                assert c.unit == "ns" and str(c.type) == "int64", (t.name, c.name)
