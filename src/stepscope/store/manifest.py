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
                ranks=_ranks(d["ranks"], path),
                clock=str(d.get("clock", "unix_ns")),
                clock_offset_ns=_int(d.get("clock_offset_ns", 0), "clock_offset_ns", path),
                created=str(d.get("created", "")),
                stepscope_version=str(d.get("stepscope_version", "")),
                schema_version=version,
                partial=bool(d.get("partial", False)),
                settings=dict(d.get("settings", {})),
                overhead=dict(d.get("overhead", {})),
                diagnostics=tuple(Diagnostic(**x) for x in d.get("diagnostics", ())),
                tables=_tables(d.get("tables", {}), path),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RunError(f"{path}: manifest is malformed ({exc!r})") from None


INT64 = (-(1 << 63), (1 << 63) - 1)
MAX_RANK = (1 << 31) - 1  # the tables' rank column is int32


def _int(value: Any, what: str, path: str, lo: int = INT64[0], hi: int = INT64[1]) -> int:
    """An integer of the manifest, checked: a float, a string, a bool or null is not one (a
    rank of "zero" must not become rank 0 or a report of nothing)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunError(f"{path}: manifest is malformed ({what} is {value!r}, not an integer)")
    if not lo <= value <= hi:
        raise RunError(f"{path}: manifest is malformed ({what} {value} is out of range "
                       f"{lo}..{hi})")
    return value


def _ranks(items: Any, path: str) -> tuple[RankInfo, ...]:
    if not isinstance(items, list):
        raise RunError(f"{path}: manifest is malformed ('ranks' is not a list)")
    ranks = []
    for r in items:
        if not isinstance(r, dict):
            raise RunError(f"{path}: manifest is malformed (a rank is {r!r}, not an object)")
        rank = _int(r.get("rank"), "rank", path, 0, MAX_RANK)
        if r.get("pid") is not None:
            _int(r["pid"], "pid", path)
        ranks.append(RankInfo(**{**r, "rank": rank}))
    seen = [r.rank for r in ranks]
    dup = sorted({r for r in seen if seen.count(r) > 1})
    if dup:
        raise RunError(f"{path}: manifest is malformed (rank {dup[0]} is listed twice)")
    return tuple(ranks)


def _tables(counts: Any, path: str) -> dict[str, int]:
    if not isinstance(counts, dict):
        raise RunError(f"{path}: manifest is malformed ('tables' is not an object)")
    return {str(k): _int(v, f"the row count of {k}", path, 0) for k, v in counts.items()}


def read_manifest(run_dir: Path) -> Manifest:
    path = run_dir / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"{run_dir}: not a stepscope run (no {MANIFEST_NAME})") from None
    except OSError as exc:
        raise RunError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, ValueError):
        raise RunError(f"{path}: not a stepscope manifest (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise RunError(f"{path}: invalid manifest (JSON nested too deeply)") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: manifest is not a JSON object")
    return Manifest.from_dict(data, str(path))
