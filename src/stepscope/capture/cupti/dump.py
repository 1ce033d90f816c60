"""``STEPSCOPE_CUPTI_DUMP=DIR``: keep a capture's raw CUPTI buffers, the strings their records
point to and the callback names, as they came (how the decoder's CI fixtures in
``tests/data/cupti`` were recorded; ``benchmarks/capture/pack_dump.py`` packs a dump)."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepscope.settings import Settings


class BufferDump:
    """Where a capture's buffers, strings and call names go (one folder)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.strings: dict[int, str] = {}
        self.api_names: dict[str, str] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BufferDump | None:
        folder = Settings.from_env(environ).cupti_dump
        return cls(folder) if folder else None

    def buffer(self, index: int, ptr: int, valid: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"buffer-{index:04d}.bin").write_bytes(ctypes.string_at(ptr, valid))

    def write_meta(self, meta: dict[str, Any]) -> None:
        """``meta`` (version, layout, settings) with the strings and call names seen."""
        out = {**meta, "strings": {str(k): v for k, v in self.strings.items()},
               "api_names": self.api_names}
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "meta.json").write_text(json.dumps(out, indent=1))
