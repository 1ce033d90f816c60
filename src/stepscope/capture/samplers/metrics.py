"""Opening the periodic metric samplers (psutil, NVML) of one profiled process.

Used by both places the samplers run: the separate sampler process (``samplers.remote``, the
default) and a thread inside the profiled process (the fallback, and tests with a fake NVML).
What cannot be opened is reported through ``diag(level, code, message)`` and in ``status``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from stepscope.capture.samplers import Row
from stepscope.capture.samplers.nvml import NvmlSampler
from stepscope.capture.samplers.system import PsutilSampler

Diag = Callable[[str, str, str], None]  # level, code, message


@dataclass
class OpenSamplers:
    """The samplers that opened (``sample(ts)`` each), their state strings and the NVML facts
    the manifest reports (``nvml_info``)."""

    samplers: list[Callable[[int], list[Row]]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    psutil_unavailable: dict[str, str] = field(default_factory=dict)
    nvml: NvmlSampler | None = None

    def sample(self, ts: int) -> list[Row]:
        rows: list[Row] = []
        for fn in self.samplers:
            rows.extend(fn(ts))
        return rows

    def nvml_info(self) -> dict[str, Any]:
        """GPU names, NUMA nodes, GPM support and unavailable metrics (JSON-able, int keys)."""
        nv = self.nvml
        if nv is None:
            return {}
        return {"names": dict(nv.names), "numa_nodes": dict(nv.numa_nodes), "gpm": dict(nv.gpm),
                "unavailable": dict(nv.unavailable)}

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()


def open_samplers(*, pid: int, nvml: bool, worker_pids: Callable[[], frozenset[int] | None],
                  import_module: Callable[[str], ModuleType], nvml_module: Any,
                  env: Mapping[str, str], sys_root: str, diag: Diag) -> OpenSamplers:
    """psutil for process ``pid`` and the system, NVML for the GPUs ``env`` makes visible."""
    out = OpenSamplers()
    try:
        ps = PsutilSampler(import_module("psutil"), worker_pids=worker_pids, pid=pid)
        ps.prime()
        out.psutil_unavailable = ps.unavailable
        out.samplers.append(ps.sample)
        out.status["psutil"] = "ok"
    except Exception as e:
        out.status["psutil"] = f"missing: {type(e).__name__}: {e}"
        diag("warning", "psutil_missing", f"psutil missing ({e}): no CPU, memory, disk or network "
             "samples; pip install psutil")
    if not nvml:
        out.status["nvml"] = "off (HostSettings.nvml = False)"
        return out
    module = nvml_module
    if module is None:
        try:
            module = import_module("pynvml")
        except Exception as e:
            out.status["nvml"] = f"missing: {e}"
            diag("info", "nvml_missing", f"NVML not available: nvidia-ml-py not importable ({e}); "
                 "no GPU samples; pip install 'stepscope[gpu]'")
            return out
    sampler = NvmlSampler(module, env=env, sys_root=sys_root)
    why = sampler.open()
    if why is not None:
        sampler.close()
        out.status["nvml"] = why
        diag("info", "nvml_unavailable", f"{why}; no GPU samples")
        return out
    out.status["nvml"] = "ok"
    out.nvml = sampler
    out.samplers.append(sampler.sample)
    no_gpm = [i for i, ok in sampler.gpm.items() if not ok]
    if no_gpm:
        diag("info", "gpm_unavailable", f"GPU {', '.join(map(str, no_gpm))}: no GPM metrics "
             "(SM activity, tensor activity, DRAM bandwidth); gpu.util_pct only says "
             "'a kernel was running'")
    return out
