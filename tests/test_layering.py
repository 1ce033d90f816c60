"""The dependency direction: cli -> reporters -> advisor -> model -> analysis -> store <-
importers, capture (<- recording); cli -> exporters -> store. Inside analysis only the step graph
(analysis/graph.py) reads a run: the other analysis modules, the model and the advisor are
functions of the graph. Capture and importers meet only in the store
(``store.produce``: rank bundles, the one run assembler, device rows); where capture needs an
importer (``--backend torch``'s Kineto trace is read at the merge) the caller that knows both
injects it (cli, recording).

Inside reporters, only the modules that build the Report from a run (:data:`BUILDERS`) read the
store; the render modules take the Report. schema (and its schema_enums, schema_ncu), errors, settings,
_version, call_kinds, progress and pools may be imported by every layer; nothing imports cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "stepscope"

# layer -> layers it may import (besides itself and the shared modules)
ALLOWED = {
    "store": set(),
    "importers": {"store"},
    "capture": {"store"},
    "analysis": {"store"},
    "model": {"analysis", "store"},  # what-if on the step graph
    "advisor": {"model", "analysis"},
    # two runs' analyses and advice compared (stepscope diff)
    "compare": {"advisor", "model", "analysis"},
    # render modules: the Report's own types (advisor findings, analysis results), the Diff
    "reporters": {"advisor", "model", "analysis", "compare"},
    "exporters": {"analysis", "store"},  # run -> Perfetto / Chrome trace events (tables via the graph)
    "cli": {"reporters", "exporters", "compare", "advisor", "model", "analysis", "store", "importers",
            "capture", "recording"},
    # stepscope.record() / step(): the twin of `record` (importers: the torch trace's reader)
    "recording": {"capture", "store", "importers"},
    # stepscope.load(): a run or traces as a Profile answering with Arrow tables; its card
    # and reports are rendered by reporters (the Python twin of import + report + diff)
    "notebook": {"reporters", "compare", "analysis", "store", "importers"},
    # stepscope.torch: the torch.profiler hand-off (a run per cycle, findings printed by a
    # reporter)
    "torch": {"notebook", "reporters"},
}
SHARED = {"schema", "schema_enums", "schema_ncu", "pools", "errors", "settings", "_version", "call_kinds", "progress",
          "__init__", "__main__"}
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


# who may read a run's tables: the store itself, the producers that write runs, the step graph
# (analysis/graph.py: every analysis, model, advisor, reporter and exporter reads through it) and
# `stepscope query` (SQL over the store is that verb's job)
TABLE_READERS = ("store/", "importers/", "capture/", "analysis/graph.py", "cli/query.py")


def table_reads(path: Path, root: Path = SRC) -> list[str]:
    """``.table(`` on a run / ``.query(`` / ``.derived(`` calls in one module, and, in
    analysis, model and advisor, imports of the store (the graph is their one way in)."""
    rel = path.relative_to(root).as_posix()
    text = path.read_text()
    bad = [f"{rel}: {m}" for m in ("run.table(", ".query(", ".derived(") if m in text]
    if rel.split("/")[0] in ("analysis", "model", "advisor"):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "stepscope.store") and rel not in ("analysis/results.py", "analysis/graph.py"):
                bad.append(f"{rel} imports {node.module}")
    return bad


def test_only_the_graph_reads_a_run() -> None:
    bad = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith(TABLE_READERS):
            bad += table_reads(path)
    assert bad == []


def test_table_read_check_sees_a_read(tmp_path: Path) -> None:
    # the checker itself must be able to fail: a reporter reading a table directly is caught
    (tmp_path / "reporters").mkdir()
    fake = tmp_path / "reporters" / "x.py"
    fake.write_text("def f(run):\n    return run.table('kernels')\n")
    assert table_reads(fake, tmp_path) == ["reporters/x.py: run.table("]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "y.py").write_text("from stepscope.store.run import Run\n")
    assert table_reads(tmp_path / "model" / "y.py", tmp_path) == [
        "model/y.py imports stepscope.store.run"]


def test_layering_check_sees_violations(tmp_path: Path) -> None:
    # the checker itself must be able to fail: analysis importing reporters is caught
    assert "reporters" not in ALLOWED["analysis"]
    assert ALLOWED["capture"] == ALLOWED["importers"] == {"store"}  # producers meet in the store
    assert "store" not in ALLOWED["advisor"] and "advisor" not in ALLOWED["model"]
    assert "store" not in ALLOWED["reporters"]  # a render module reading the run is caught
    assert set(BUILDERS) == {"reporters/report.py", "reporters/timeline_build.py"}
    assert "cli" not in set().union(*ALLOWED.values())


PRODUCERS = ("store", "importers", "capture", "schema")  # the layers that make runs


def module_imports() -> dict[str, set[str]]:
    """Module -> the stepscope modules it imports (anywhere in it: lazy imports count)."""
    mods = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[m].update(n for n in names if n in mods and n != m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_producers_have_no_import_circles() -> None:
    def producer(m: str) -> bool:
        parts = m.split(".")
        return len(parts) > 1 and parts[1] in PRODUCERS

    mine = {m: {n for n in deps if producer(n)}
            for m, deps in module_imports().items() if producer(m)}
    assert "stepscope.capture.materialize" in mine["stepscope.capture.partitions"]  # seen
    assert cycles(mine) == []
    # the check sees a circle (capture/materialize <-> capture/partitions, before issue 18)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles_anywhere() -> None:
    # a package's __init__ re-exporting its modules is a circle when one of them imports the
    # package back (``from stepscope.analysis import intervals``): import the module itself
    assert cycles(module_imports()) == []
