from __future__ import annotations

from pathlib import Path

from stepscope import schema_doc

DOC = Path(__file__).parent.parent / "docs" / "schema.md"


def test_docs_schema_is_generated_from_schema_py() -> None:
    assert DOC.read_text() == schema_doc.markdown(), (
        "docs/schema.md is stale: run `python -m stepscope.schema_doc > docs/schema.md`")
