"""What a process's capture is told to do (``CaptureConfig``, handed over as JSON in the
``STEPSCOPE_CAPTURE`` environment variable by the launcher), and the host capture it runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from stepscope.capture.schedule import DEFAULT_WARMUP_S, Schedule
from stepscope.store.manifest import Diagnostic

ENV_VAR = "STEPSCOPE_CAPTURE"


@dataclass(frozen=True)
class CaptureConfig:
    staging: str
    schedule: Schedule = field(default_factory=Schedule)
    sample_hz: float = 10.0
    stack_hz: float = 20.0
    stacks: bool = True
    nvml: bool = True
    hooks: bool = True
    max_rows: int = 2_000_000
    flush_every_s: float = 5.0
    # timed windows: the GPU backend starts this long before the window opens (CUPTI takes
    # ~0.3-0.5 s to start recording; measured on the H100, docs/record.md), records before the
    # window are clipped away
    gpu_lead_s: float = 1.0
    pkg_root: str = ""  # folder holding the stepscope package (for the injected sitecustomize)
    gpu: str = "auto"  # GPU backend: auto | cupti | cupti-python | torch | none (capture.gpu)
    gpu_api: str = "filtered"  # runtime/driver calls: none | filtered | all
    nvtx_step: str = ""  # --nvtx NAME: the NVTX ranges named NAME are the steps
    # the default window's fallback (capture.auto_window): no step hook has fired this long
    # after the GPU was first used: a time window opens; negative: no fallback
    auto_warmup_s: float = DEFAULT_WARMUP_S
    # size torch.distributed's flight recorder (when the user has not) and read what
    # collectives the window issued (capture.flight_recorder); --no-flight-recorder: neither
    flight_recorder: bool = True

    @property
    def auto_window(self) -> bool:
        """Whether the fallback runs: the default schedule only (not --steps, --delay/--duration
        or --nvtx, which the user chose)."""
        s = self.schedule
        return (not s.timed and s.last is None and not self.nvtx_step
                and self.auto_warmup_s >= 0)

    def to_json(self) -> str:
        d = asdict(self)
        d["schedule"] = self.schedule.to_dict()
        return json.dumps(d)

    @staticmethod
    def from_json(text: str) -> CaptureConfig:
        d = json.loads(text)
        d["schedule"] = Schedule.from_dict(d.get("schedule") or {})
        known = CaptureConfig.__dataclass_fields__
        return CaptureConfig(**{k: v for k, v in d.items() if k in known})


class HostLike(Protocol):
    def start(self) -> None: ...
    def stop(self, keep_hooks: bool = False) -> None: ...
    def release_hooks(self) -> None: ...
    def mark_step(self, ts_ns: int | None = None) -> None: ...
    def add_step_listener(self, fn: Callable[[int], None]) -> None: ...
    def drain(self) -> dict[str, dict[str, list[Any]]]: ...
    def settings_for_manifest(self) -> dict[str, Any]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...


def default_host(config: CaptureConfig, rank: int, clock: Callable[[], int]) -> HostLike:
    from stepscope.capture.host import HostCapture, HostSettings

    settings = HostSettings(sample_hz=config.sample_hz,
                            stack_hz=config.stack_hz if config.stacks else 0.0,
                            nvml=config.nvml, hooks=config.hooks or bool(config.nvtx_step),
                            nvtx_step=config.nvtx_step)
    return HostCapture(settings, rank=rank, clock=clock)


__all__ = ["ENV_VAR", "CaptureConfig", "HostLike", "default_host"]
