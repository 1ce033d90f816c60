"""Which CUDA activity a CUPTI capture records (``GpuSettings``): activity kinds, runtime/driver
calls, buffer sizes.

Which runtime/driver calls are recorded (``--gpu-api filtered``): only those the analysis uses
(launches, graph launches, synchronisation, copies, memsets, allocations), so that the ~8
bookkeeping calls PyTorch makes per launch (cudaGetDevice…) are not recorded.

How they are recorded (``api_via``): ``callbacks`` (the default) hooks only the kept calls,
through CUPTI's Callback API switched on call by call, and writes the same records as CUPTI's
in C (``api_callbacks``); ``activity`` uses CUPTI's RUNTIME/DRIVER activity kinds, which hook
every call of their domain. CUPTI's GPU-side synchronization records (``sync``: the ``sync``
table) are off by default: the analysis times syncs from the sync calls themselves, and the
SYNCHRONIZATION kind hooks every call too. Measured on the H100 (docs/benchmarks.md, 2026-11-25
fifth session): with both, the GPT step's capture cost x1.03-1.04 instead of x1.18-1.19.
Knobs: ``STEPSCOPE_CUPTI_API_VIA=activity``, ``STEPSCOPE_CUPTI_SYNC=1``.

Through callbacks, a driver call made inside a recorded runtime call of the same thread (the
runtime's own ``cuLaunchKernel`` under ``cudaLaunchKernel``) is not written (``nested_driver``
False, the default): its record used to be written and then dropped at decode. The GPU records
carry the runtime call's correlation id. ``STEPSCOPE_CUPTI_NESTED_DRIVER=1`` writes them again
(the knob the overhead benchmark turns).

Buffers: CUPTI zeroes every buffer it is given, in the program's thread that asks for it (2-6 ms
per 8 MB buffer in CUPTI's own overhead records on the H100), unless told they are zero-filled
already. The shim's are (``_shim.c``), so CUPTI is told so (``zeroed_buffers``;
``STEPSCOPE_CUPTI_ZEROED_BUFFERS=0`` leaves it to CUPTI), and ``prepared_buffers`` (4; knob
``STEPSCOPE_CUPTI_PREPARED_BUFFERS``) are made ahead at start, their pages mapped, so that the
first buffers of a window cost the program nothing.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from stepscope.call_kinds import classify_api
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import api_base_name, wanted_call
from stepscope.schema_enums import ApiKind
from stepscope.settings import Settings

# Driver calls kept in a torch process: the launches that do not come from torch's runtime calls
# (cuBLASLt's GEMMs launch with cuLaunchKernelEx, Triton's kernels with cuLaunchKernel).
TORCH_DRIVER_CALLS = frozenset({"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel"})
_PER_THREAD_STREAM = re.compile(r"_pt(sz|ds)$")  # cuLaunchKernel_ptsz: the per-thread-stream twin


def _detach() -> bool:
    """``STEPSCOPE_CUPTI_DETACH=0`` leaves CUPTI attached after the capture (``detach``): the
    knob the overhead benchmark turns to show what detaching is worth."""
    return Settings.from_env().cupti_detach


def detach_with_graphs() -> bool:
    """``STEPSCOPE_CUPTI_DETACH=always`` detaches even after the program launched CUDA graphs
    under CUPTI (``capture.cupti.detach``: that makes later launches of those graphs fail). For
    checking that hazard on a GPU only."""
    return Settings.from_env().cupti_detach_with_graphs


def _api_via() -> str:
    """``STEPSCOPE_CUPTI_API_VIA=activity`` records the kept calls through CUPTI's activity kinds
    instead of its callbacks (``api_via``)."""
    return Settings.from_env().cupti_api_via


def _sync() -> bool:
    """``STEPSCOPE_CUPTI_SYNC=1`` records CUPTI's GPU-side synchronization records (``sync``)."""
    return Settings.from_env().cupti_sync


def _nested_driver() -> bool:
    """``STEPSCOPE_CUPTI_NESTED_DRIVER=1`` records the driver calls made inside recorded runtime
    calls too (``nested_driver``)."""
    return Settings.from_env().cupti_nested_driver


def _zeroed_buffers() -> bool:
    """``STEPSCOPE_CUPTI_ZEROED_BUFFERS=0`` leaves the zeroing of each buffer to CUPTI
    (``zeroed_buffers``)."""
    return Settings.from_env().cupti_zeroed_buffers


def _prepared_buffers() -> int:
    """``STEPSCOPE_CUPTI_PREPARED_BUFFERS=N`` (default 4) buffers made ahead at start."""
    return Settings.from_env().cupti_prepared_buffers


def _torch_driver_calls() -> frozenset[str]:
    """``STEPSCOPE_TORCH_DRIVER_CALLS`` (comma-separated; empty = none) overrides the default: the
    knob the overhead benchmark turns."""
    calls = Settings.from_env().torch_driver_calls
    return TORCH_DRIVER_CALLS if calls is None else calls


@dataclass(frozen=True)
class GpuSettings:
    api: str = "filtered"  # "none" | "filtered" (calls that matter) | "all"
    # driver-API calls: JAX, CuPy, cuBLASLt and Triton launch through the driver. None = the ones
    # that matter, except in a process that imported torch: there only ``torch_driver_calls`` (each
    # of torch's runtime launches would also add a nested driver record, dropped at decode but paid
    # for at capture; measured in docs/benchmarks.md). True/False: every one that matters / none.
    driver: bool | None = None
    torch_driver_calls: frozenset[str] = field(default_factory=_torch_driver_calls)
    memcpy: bool = True
    memset: bool = True
    sync: bool = field(default_factory=_sync)  # CUPTI's SYNCHRONIZATION records (module doc)
    nvtx: bool = True
    overhead: bool = True
    buffer_mb: int = 8
    max_mb: int = 1024
    detach: bool = field(default_factory=_detach)  # cuptiFinalize after the capture (detach.py)
    api_via: str = field(default_factory=_api_via)  # "callbacks" | "activity" (module doc)
    # through callbacks: also write driver calls made inside recorded runtime calls (module doc)
    nested_driver: bool = field(default_factory=_nested_driver)
    # buffers handed to CUPTI zero-filled by the shim, so CUPTI does not zero each one in the
    # program's thread (module doc); and this many made ahead at start, their pages mapped
    zeroed_buffers: bool = field(default_factory=_zeroed_buffers)
    prepared_buffers: int = field(default_factory=_prepared_buffers)

    def use_driver(self) -> bool:
        if self.driver is None:
            return "torch" not in sys.modules or bool(self.torch_driver_calls)
        return self.driver

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["torch_driver_calls"] = sorted(self.torch_driver_calls)
        return d

    def keep_call(self, domain: int, raw: str) -> bool:
        """Whether the records of this runtime/driver call are kept (``--gpu-api filtered``)."""
        if not wanted_call(raw):
            return False
        if domain == L.DOMAIN_DRIVER_API and self.driver is None and "torch" in sys.modules:
            # graph launches always: another framework of the process (JAX's XLA) launches its
            # graphs through the driver, and the detach must know of them (capture.cupti.detach)
            return (_PER_THREAD_STREAM.sub("", api_base_name(raw)) in self.torch_driver_calls
                    or classify_api(raw) is ApiKind.GRAPH_LAUNCH)
        return True

    def kinds(self) -> list[int]:
        ks = [L.CONCURRENT_KERNEL]
        ks += [L.MEMCPY, L.MEMCPY2] if self.memcpy else []
        ks += [L.MEMSET] if self.memset else []
        ks += [L.SYNCHRONIZATION] if self.sync else []
        ks += [L.MARKER] if self.nvtx else []
        ks += [L.OVERHEAD] if self.overhead else []
        if self.api == "all":
            ks += [L.RUNTIME] + ([L.DRIVER] if self.use_driver() else [])
        return ks


__all__ = ["TORCH_DRIVER_CALLS", "GpuSettings"]
