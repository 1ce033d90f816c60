"""docs/notebook.ipynb runs from top to bottom (nbclient + ipykernel, the ``[dev]`` extra),
showing what the docs say it shows."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

DOCS = Path(__file__).parent.parent.parent / "docs"
SRC = Path(__file__).parent.parent.parent / "src"


def _outputs(nb: object, kind: str) -> list[str]:
    out = []
    for cell in nb.cells:  # type: ignore[attr-defined]
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(("stream", o["text"]))
            else:
                out += [(f"{o['output_type']}:{mime}", text)
                        for mime, text in o.get("data", {}).items()]
    return [text for k, text in out if k.endswith(kind)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_docs_notebook_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(DOCS / "notebook.ipynb", as_version=4)
    for cell in nb.cells:
        cell.pop("outputs", None) if cell.cell_type != "code" else cell.update(outputs=[])
    # the kernel imports this checkout's stepscope, installed or not
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    t0 = time.monotonic()
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(DOCS)}}).execute()
    took = time.monotonic() - t0
    html = "".join(_outputs(nb, "text/html"))
    assert "stepscope-card" in html and "pageable_memcpy" in html  # the card, with findings
    text = "".join(_outputs(nb, "stream"))
    assert "pageable_memcpy" in text and "verdict: " in text
    assert "Where a step's time goes" in text  # p.report(), printed as text
    assert not [o for c in nb.cells for o in c.get("outputs", [])
                if o.get("output_type") == "display_data"]  # the text report is never a display
    assert took < 90, f"the docs notebook took {took:.0f} s"
