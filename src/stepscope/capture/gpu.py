"""Choosing and running the GPU capture backend of a process.

Backends: ``cupti`` (CUPTI Activity API through ctypes and the C buffer shim: the default),
``cupti-python`` (the same records through NVIDIA's cupti-python package, an optional extra:
kept to measure against), ``torch`` (PyTorch's profiler), ``none``. ``auto`` is ``cupti``;
when GPU capture cannot start, the reason becomes a diagnostic and host capture carries on (where
there is no usable GPU, the driver's reason is given: ``cuda_driver.no_gpu_reason``, rather than
the backend's, e.g. CUPTI's ``CUPTI_ERROR_UNKNOWN``). When the backend stops, the ``devices`` rows
of the GPUs the process used are added to its last tables, whichever the backend
(``capture.devices``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from stepscope.capture import cuda_driver
from stepscope.capture.backends import BACKENDS
from stepscope.capture.devices import TopologyReader, devices_table
from stepscope.errors import CaptureError
from stepscope.store.manifest import Diagnostic
from stepscope.store.produce.devices import record_devices


class GpuLike(Protocol):
    backend: str

    def start(self) -> None: ...
    def flush(self, forced: bool = False) -> dict[str, Any]: ...
    def stop(self) -> dict[str, Any]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...
    def settings_for_manifest(self) -> dict[str, Any]: ...


def make_gpu(backend: str, api: str = "filtered", spill_dir: Path | None = None) -> GpuLike | None:
    """The backend's capture object (not started); None for ``none``. Raises ``Unavailable``.
    ``spill_dir``: the ``cupti`` backend keeps its raw records there, to be decoded at merge
    (``capture.cupti.spill``), and the ``torch`` backend its Kineto trace, to be read at merge
    (``capture.torch_backend``); ``cupti-python`` hands decoded tables over at each flush."""
    if backend == "none":
        return None
    if backend == "torch":
        from stepscope.capture.cupti.native import Unavailable
        from stepscope.capture.torch_backend import TorchCapture

        if spill_dir is None:
            raise Unavailable("--backend torch: no staging folder to export the trace into")
        return TorchCapture(spill_dir)
    from stepscope.capture.cupti.capture import CuptiCapture
    from stepscope.capture.cupti.settings import GpuSettings

    settings = GpuSettings(api=api)
    if backend == "cupti-python":
        from stepscope.capture.cupti.pycupti import PyCuptiCapture

        return PyCuptiCapture(settings)
    if backend in ("auto", "cupti"):
        return CuptiCapture(settings, spill_dir=spill_dir)
    raise ValueError(f"unknown GPU backend {backend!r} (one of {', '.join(BACKENDS)})")


GpuFactory = Callable[[str, str], "GpuLike | None"]
DriverFactory = Callable[[], "cuda_driver.CudaDriver | None"]


class GpuSlot:
    """One process's GPU backend through the session: made off the training thread
    (``prepare``: imports, libraries, the shim), started (``start``), drained (``data``)."""

    def __init__(self, backend: str, api: str, factory: GpuFactory, *,
                 driver: DriverFactory | None = None,
                 no_gpu: Callable[[], str | None] | None = None,
                 topology: TopologyReader | None = None) -> None:
        """``driver``: the CUDA driver already in the process (default: ``CudaDriver.attach``,
        which never loads it); ``no_gpu``: why there is no usable GPU (default:
        ``cuda_driver.no_gpu_reason``), asked only when the backend cannot start; ``topology``:
        adds where each GPU sits (NUMA node, NVLink, PCIe) to the ``devices`` rows (default:
        none; a recording passes ``capture.topology.with_topology``)."""
        self.backend, self.api, self._factory = backend, api, factory
        self._topology = topology
        self._driver, self._no_gpu = driver, no_gpu
        self.gpu: GpuLike | None = None
        self._ready: threading.Event | None = None
        self._made: list[Any] = []  # [GpuLike | None] or [exception]
        self._tried = False
        self._status: dict[str, Any] = {"backend": backend, "state": "not started"}
        self._raw = 0

    @property
    def status(self) -> dict[str, Any]:
        return dict(self._status)

    def prepare(self) -> None:
        """Make the backend on a background thread (idempotent)."""
        if self.backend == "none" or self._ready is not None or self._tried:
            return
        ready = threading.Event()

        def make() -> None:
            try:
                self._made.append(self._factory(self.backend, self.api))
            except BaseException as exc:
                self._made.append(exc)
            finally:
                ready.set()

        self._ready = ready
        threading.Thread(target=make, name="stepscope-gpu-prepare", daemon=True).start()

    def start(self) -> Diagnostic | None:
        """Start once; a backend that cannot run gives a diagnostic (the host capture goes on)."""
        if self._tried:
            return None
        self._tried = True
        if self.backend == "none":
            self._status = {"backend": "none", "state": "off"}
            return None
        try:
            if self._ready is not None:
                if not self._ready.wait(120):
                    raise CaptureError("the GPU backend was still loading after 120 s")
                made = self._made[0] if self._made else None
                if isinstance(made, Exception):
                    raise made
                if isinstance(made, BaseException):  # never re-raise SystemExit & co. in the program
                    raise CaptureError(f"the GPU backend could not be made: {made!r}")
                gpu = made
            else:
                gpu = self._factory(self.backend, self.api)
            if gpu is None:
                self._status = {"backend": "none", "state": "off"}
                return None
            gpu.start()
        except Exception as exc:  # never break the program: say why and go on host-only
            msg = str(exc) if isinstance(exc, CaptureError) else repr(exc)
            why = self._no_gpu_reason()
            self._status = {"backend": self.backend, "state": "unavailable", "reason": why or msg,
                            **({"backend_error": msg} if why else {})}
            return Diagnostic("warning", "gpu_not_captured", f"GPU activity not captured "
                              f"({self.backend}): {why or msg}; host-side data only")
        self.gpu = gpu
        self._status = {"backend": gpu.backend, "state": "running"}
        return None

    def raw_records(self) -> int:
        """Records the backend has kept raw so far (the ``cupti`` backend with a spill folder:
        they reach the run when it is merged, not through ``data``)."""
        if self.gpu is not None:
            self._raw = int(getattr(self.gpu, "raw_records", 0))
        return self._raw

    def data(self, final: bool) -> tuple[dict[str, Any], list[Diagnostic]]:
        """What the backend has recorded so far (``final``: stop it and take the rest)."""
        gpu = self.gpu
        if gpu is None:
            return {}, []
        diags: list[Diagnostic] = []
        try:
            # forced: CUPTI hands over its partly filled buffers too, so that a process killed
            # later keeps the GPU records of every flush (a full 8 MB buffer can take minutes)
            data = gpu.stop() if final else gpu.flush(forced=True)
        except Exception as exc:
            diags.append(Diagnostic("error", "gpu_capture_failed", f"GPU capture failed: {exc!r}"))
            data = {}
        if final:
            self._raw = int(getattr(gpu, "raw_records", 0))
            self.gpu = None
            try:
                settings = gpu.settings_for_manifest()
            except Exception as exc:
                settings = {"backend": gpu.backend, "settings_error": repr(exc)}
            self._status = {"state": "stopped", **settings}
            diags.extend(gpu.diagnostics)
            data = self._with_devices(data, diags)
        return data, diags

    def _no_gpu_reason(self) -> str | None:
        try:
            return (self._no_gpu or cuda_driver.no_gpu_reason)()
        except Exception:  # noqa: BLE001 - a diagnostic must never break the program
            return None

    def _with_devices(self, data: dict[str, Any], diags: list[Diagnostic]) -> dict[str, Any]:
        """``data`` with the ``devices`` rows of the GPUs the process used (``capture.devices``)
        in place of any the backend made."""
        rest = {k: v for k, v in data.items() if k != "devices"}
        try:
            driver = (self._driver or cuda_driver.CudaDriver.attach)()
            rows = devices_table(driver, data, self._topology)
        except Exception as exc:  # noqa: BLE001 - never break the program for a table
            diags.append(Diagnostic("warning", "devices_not_read",
                                    f"the GPUs' properties could not be read: {exc!r}"))
            return rest
        if rows is None and (self._raw or record_devices(data)):
            diags.append(Diagnostic(
                "warning", "devices_not_read", "the process recorded GPU activity but the CUDA "
                "driver was not found in it: no devices table (occupancy and the rules that need "
                "the GPU's limits are skipped)"))
        return rest if rows is None else {**rest, "devices": rows}



