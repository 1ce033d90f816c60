"""The compiled parts are optional for users (a fallback runs without them), so their tests skip
when they are not built; CI sets STEPSCOPE_REQUIRE_EXTENSIONS=1 so that a build that silently
failed turns the suite red instead."""

from __future__ import annotations

import importlib
import os

import pytest

EXTENSIONS = ("stepscope.importers._ss_kineto", "stepscope.capture.cupti._ss_cupti")


@pytest.mark.skipif(not os.environ.get("STEPSCOPE_REQUIRE_EXTENSIONS"),
                    reason="STEPSCOPE_REQUIRE_EXTENSIONS is not set")
@pytest.mark.parametrize("name", EXTENSIONS)
def test_extension_is_built(name: str) -> None:
    if name.endswith("_ss_cupti"):  # a plain shared library (no module init), loaded by ctypes
        from stepscope.capture.cupti import native

        shim = native._prebuilt()
        assert shim is not None, "the CUPTI shim extension was not built"
        path = str(shim)
    else:
        path = str(importlib.import_module(name).__file__)
    # the stable-ABI build (pyproject.toml: py-limited-api), what the wheel ships; an older
    # version-specific build left in src/ is imported first: delete it (`make clean`) and rebuild
    assert path.endswith(".abi3.so"), f"{path}: not the stable-ABI (abi3) build"
