"""The dependency direction: cli -> reporters -> advisor -> analysis -> store <- importers,
capture (<- recording); cli -> exporters -> store; capture -> importers (the torch backend imports
its own Kineto trace).

Inside reporters, only the modules that build the Report from a run (:data:`BUILDERS`) read the
store; the render modules take the Report. schema, errors, settings, _version and call_kinds may be
imported by every layer; nothing imports cli.
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
    # render modules: the Report's own types (advisor findings, analysis results)
    "reporters": {"advisor", "model", "analysis"},
    "exporters": {"store"},  # run -> Perfetto / Chrome trace events
    "cli": {"reporters", "exporters", "advisor", "model", "analysis", "store", "importers",
            "capture", "recording"},
    "recording": {"capture", "store"},  # stepscope.record() / step(): the twin of `record`
}
SHARED = {"schema", "errors", "settings", "_version", "call_kinds", "__init__", "__main__"}
# modules with more than their layer may import: the Report's builders read the run
BUILDERS = {"reporters/report.py": {"store"}, "reporters/timeline_build.py": {"store"}}


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
                extra = BUILDERS.get(path.relative_to(SRC).as_posix(), set())
                if target not in ALLOWED.get(layer, set()) | extra:
                    bad.append(f"{path.relative_to(SRC)} imports stepscope.{target}")
    assert bad == []


def test_layering_check_sees_violations(tmp_path: Path) -> None:
    # the checker itself must be able to fail: analysis importing reporters is caught
    assert "reporters" not in ALLOWED["analysis"]
    assert "store" not in ALLOWED["reporters"]  # a render module reading the run is caught
    assert set(BUILDERS) == {"reporters/report.py", "reporters/timeline_build.py"}
    assert "cli" not in set().union(*ALLOWED.values())
