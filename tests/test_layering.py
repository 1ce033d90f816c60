"""The dependency direction: cli -> reporters -> report -> advisor -> model -> analysis -> store <-
importers, capture (<- api); capture -> importers (the torch backend imports its own Kineto
trace). Inside analysis only the step graph (analysis/graph.py) reads a run: the other analysis
modules, the model and the advisor are functions of the graph.

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
    "model": {"analysis", "store"},
    "advisor": {"model", "analysis"},
    "report": {"advisor", "analysis", "store"},
    "reporters": {"report", "advisor", "analysis", "store"},
    "cli": {"reporters", "report", "advisor", "analysis", "store", "importers", "capture", "api"},
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


def test_only_the_graph_reads_a_run_in_analysis_model_and_advisor() -> None:
    # run.table( / run.query( / store imports: only analysis/graph.py (the step graph)
    bad = []
    for layer in ("analysis", "model", "advisor"):
        for path in (SRC / layer).rglob("*.py"):
            rel = path.relative_to(SRC).as_posix()
            if rel == "analysis/graph.py":
                continue
            text = path.read_text()
            if "run.table(" in text or "run.query(" in text or ".derived(" in text:
                bad.append(rel)
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "stepscope.store") and rel != "analysis/__init__.py":
                    bad.append(f"{rel} imports {node.module}")
    assert bad == []


def test_layering_check_sees_violations(tmp_path: Path) -> None:
    # the checker itself must be able to fail: analysis importing reporters is caught
    assert "reporters" not in ALLOWED["analysis"]
    assert "store" not in ALLOWED["advisor"] and "advisor" not in ALLOWED["model"]
    assert "cli" not in set().union(*ALLOWED.values())
