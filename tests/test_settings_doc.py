"""docs/settings.md's table names every STEPSCOPE_* variable that src/ reads, however it is
spelled there (a literal name in Python or C, or ``get("NAME")`` in Settings.from_env)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
SRC = ROOT / "src" / "stepscope"


def variables_in_src() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*"):
        if path.suffix not in (".py", ".c", ".h", ".sh") or "__pycache__" in path.parts:
            continue
        text = path.read_text(errors="replace")
        names |= set(re.findall(r"\bSTEPSCOPE_[A-Z][A-Z0-9_]*\b", text))
        if path.name == "settings.py":  # get("CUPTI_SYNC", ...) reads STEPSCOPE_CUPTI_SYNC
            got = re.findall(r'\bget\("(?!STEPSCOPE_)([A-Z][A-Z0-9_]*)"', text)
            names |= {f"STEPSCOPE_{n}" for n in got}
    return names


def documented() -> set[str]:
    table = (ROOT / "docs" / "settings.md").read_text()
    return set(re.findall(r"^\| `(STEPSCOPE_[A-Z0-9_]+)` \|", table, re.M))


def test_every_variable_read_in_src_has_a_row() -> None:
    found = variables_in_src()
    assert "STEPSCOPE_CUPTI_SYNC" in found and "STEPSCOPE_CAPTURE" in found  # the scan works
    assert sorted(found - documented()) == []


def test_the_readme_links_the_table() -> None:
    assert "docs/settings.md" in (ROOT / "README.md").read_text()
