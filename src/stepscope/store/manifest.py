"""The run manifest: what the run is, where it came from, and what went wrong on the way."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stepscope.errors import RunError
from stepscope.schema import SCHEMA_VERSION

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Diagnostic:
    """Something the producer noticed and worked around (shown in the report)."""

    level: str  # "info" | "warning" | "error"
    code: str  # stable short id, e.g. "negative_duration"
    message: str
    file: str = ""
    count: int = 1


@dataclass(frozen=True)
class SourceInfo:
    kind: str  # "kineto" | "capture" | "nsys" | "xspace"
    files: tuple[str, ...] = ()
    tool: str = ""  # producing tool and version, e.g. "torch.profiler (cupti 130001)"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str = ""
    pid: int | None = None
    file: str = ""
    world_size: int | None = None
    backend: str = ""


@dataclass(frozen=True)
class Manifest:
    source: SourceInfo
    ranks: tuple[RankInfo, ...]
    clock: str = "unix_ns"  # clock domain of ts_ns
    clock_offset_ns: int = 0  # added to the source's own timestamps (after unit conversion)
    created: str = ""  # ISO-8601 UTC
    stepscope_version: str = ""
    schema_version: int = SCHEMA_VERSION
    partial: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, Any] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()
    tables: dict[str, int] = field(default_factory=dict)  # table -> row count

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_dict(d: dict[str, Any], path: str = MANIFEST_NAME) -> Manifest:
        try:
            version = int(d["schema_version"])
            if version > SCHEMA_VERSION:
                raise RunError(
                    f"{path}: run schema version {version} is newer than this stepscope "
                    f"understands ({SCHEMA_VERSION}); upgrade stepscope"
                )
            src = d["source"]
            return Manifest(
                source=SourceInfo(
                    kind=str(src["kind"]),
                    files=tuple(src.get("files", ())),
                    tool=str(src.get("tool", "")),
                    details=dict(src.get("details", {})),
                ),
                ranks=tuple(RankInfo(**r) for r in d["ranks"]),
                clock=str(d.get("clock", "unix_ns")),
                clock_offset_ns=int(d.get("clock_offset_ns", 0)),
                created=str(d.get("created", "")),
                stepscope_version=str(d.get("stepscope_version", "")),
                schema_version=version,
                partial=bool(d.get("partial", False)),
                settings=dict(d.get("settings", {})),
                overhead=dict(d.get("overhead", {})),
                diagnostics=tuple(Diagnostic(**x) for x in d.get("diagnostics", ())),
                tables={str(k): int(v) for k, v in d.get("tables", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RunError(f"{path}: manifest is malformed ({exc!r})") from None


def read_manifest(run_dir: Path) -> Manifest:
    path = run_dir / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"{run_dir}: not a stepscope run (no {MANIFEST_NAME})") from None
    except OSError as exc:
        raise RunError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: manifest is not a JSON object")
    return Manifest.from_dict(data, str(path))
