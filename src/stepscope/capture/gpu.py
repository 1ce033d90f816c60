"""Choosing and running the GPU capture backend of a process.

Backends: ``cupti`` (CUPTI Activity API through ctypes and the C buffer shim: the default),
``cupti-python`` (the same records through NVIDIA's cupti-python package, an optional extra:
kept to measure against), ``torch`` (PyTorch's profiler), ``none``. ``auto`` is ``cupti``;
when GPU capture cannot start, the reason becomes a diagnostic and host capture carries on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stepscope.store.manifest import Diagnostic

BACKENDS = ("auto", "cupti", "cupti-python", "torch", "none")


class GpuLike(Protocol):
    backend: str

    def start(self) -> None: ...
    def flush(self, forced: bool = False) -> dict[str, Any]: ...
    def stop(self) -> dict[str, Any]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...
    def settings_for_manifest(self) -> dict[str, Any]: ...


def make_gpu(backend: str, api: str = "filtered") -> GpuLike | None:
    """The backend's capture object (not started); None for ``none``. Raises ``Unavailable``."""
    if backend == "none":
        return None
    if backend == "torch":
        from stepscope.capture.torch_backend import TorchCapture

        return TorchCapture()
    from stepscope.capture.cupti.capture import CuptiCapture, GpuSettings

    settings = GpuSettings(api=api)
    if backend == "cupti-python":
        from stepscope.capture.cupti.pycupti import PyCuptiCapture

        return PyCuptiCapture(settings)
    if backend in ("auto", "cupti"):
        return CuptiCapture(settings)
    raise ValueError(f"unknown GPU backend {backend!r} (one of {', '.join(BACKENDS)})")


GpuFactory = Callable[[str, str], "GpuLike | None"]
