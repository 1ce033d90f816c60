"""gunzip with each zlib-compatible module (isal, zlib-ng when installed; the standard zlib
always): the same bytes, the same errors."""

from __future__ import annotations

import gzip
import importlib
import zlib
from pathlib import Path
from types import ModuleType

import pytest

from stepscope.importers.kineto.trace_file import INFLATERS, gunzip, inflater, load_bytes

CNN = Path(__file__).parent.parent.parent / "data" / "cnn_fp32_sync.pt.trace.json.gz"


def _modules() -> list[ModuleType]:
    mods = [zlib]
    for name, _ in INFLATERS:
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            continue
    return mods


@pytest.mark.parametrize("mod", _modules(), ids=lambda m: m.__name__)
def test_same_bytes_and_errors(mod: ModuleType) -> None:
    body = b'{"traceEvents": []}' * 50000
    data = gzip.compress(body[:500000]) + gzip.compress(body[500000:]) + b"\0" * 4  # 2 members
    assert bytes(gunzip(data, mod)) == body
    real = CNN.read_bytes()
    assert bytes(gunzip(real, mod)) == gzip.decompress(real)
    with pytest.raises(EOFError):
        gunzip(data[: len(data) // 3], mod)
    with pytest.raises(zlib.error):
        gunzip(data[:10] + b"\xff" * 40, mod)  # a reserved block type


def test_the_first_installed_module_is_chosen() -> None:
    assert inflater((("no_such_module_here", "x"),)) == (zlib, "zlib")
    assert inflater((("no_such_module_here", "x"), ("zlib", "plain"))) == (zlib, "plain")
    mod, name = inflater()
    installed = [n for m, n in INFLATERS if importlib.util.find_spec(m.split(".")[0])]
    assert name == (installed[0] if installed else "zlib")
    assert load_bytes(CNN).data == gzip.decompress(CNN.read_bytes())
