"""The post-import finder: callbacks after the watched module ran, the real loader put back."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from stepscope.capture.hooks.post_import import PostImportFinder


def test_post_import_finder_calls_back_after_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ss_watched_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[Any] = []
    finder = PostImportFinder({"ss_watched_mod": lambda m: seen.append(m.VALUE)})
    sys.meta_path.insert(0, finder)
    try:
        mod = importlib.import_module("ss_watched_mod")
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("ss_watched_mod", None)
    assert seen == [42]
    assert type(mod.__loader__).__name__ == "SourceFileLoader"  # the real loader is put back
    assert mod.__spec__ is not None and mod.__spec__.loader is mod.__loader__


def test_unwatched_modules_are_left_to_the_other_finders() -> None:
    finder = PostImportFinder({"ss_watched_mod": lambda m: None})
    assert finder.find_spec("json", None) is None
