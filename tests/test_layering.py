"""The dependency direction: cli -> reporters -> report -> advisor -> analysis -> store <- importers,
capture (<- api); capture -> importers (the torch backend imports its own Kineto trace).

schema, errors and apis may be imported by every layer; nothing imports cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "stepscope"

# layer -> layers it may import (besides itself and the shared modules)
ALLOWED = {
    "store": set(),
    "importers": {"store"},
    "capture": {"store", "importers"},  # --backend torch reads its Kineto trace back
    "analysis": {"store"},
    "advisor": {"analysis", "store"},
    "reporters": {"advisor", "analysis", "store"},
    "exporters": {"store"},  # run -> Perfetto / Chrome trace events
    "cli": {"reporters", "exporters", "advisor", "analysis", "store", "importers", "capture",
            "api"},
    "api": {"capture", "store"},  # stepscope.record() / step(): the Python twin of `record`
}
SHARED = {"schema", "errors", "apis", "__init__", "__main__"}


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py")


def test_imports_follow_the_pipeline() -> None:
    bad = []
    for path in SRC.rglob("*.py"):
        layer = layer_of(path)
        if layer in SHARED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                parts = n.split(".")
                if parts[0] != "stepscope" or len(parts) < 2:
                    continue
                target = parts[1]
                if target in SHARED or target == layer:
                    continue
                if target not in ALLOWED.get(layer, set()):
                    bad.append(f"{path.relative_to(SRC)} imports stepscope.{target}")
    assert bad == []


def test_layering_check_sees_violations(tmp_path: Path) -> None:
    # the checker itself must be able to fail: analysis importing reporters is caught
    assert "reporters" not in ALLOWED["analysis"]
    assert "cli" not in set().union(*ALLOWED.values())
