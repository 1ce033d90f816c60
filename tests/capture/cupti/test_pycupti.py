"""The cupti-python backend detaches CUPTI after its capture, as the default backend does: through
the libcupti cupti-python loaded (a stand-in here, ``fake_cupti``) and the real C shim. A stand-in
``cupti`` module plays cupti-python."""

from __future__ import annotations

import ctypes
import shutil
import sys
import types
from typing import Any

import pytest
from tests.capture.cupti.fake_cupti import CALLS, FakeCupti

from stepscope.capture.cupti import detach
from stepscope.capture.cupti import pycupti as pycupti_mod
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.cupti.pycupti import PyCuptiCapture
from stepscope.capture.cupti.settings import GpuSettings

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))  # a private copy: shim state


class FakeCuptiPython:
    """The calls ``PyCuptiCapture`` makes of cupti-python's ``cupti`` module."""

    def __init__(self) -> None:
        self.kinds: set[int] = set()
        self.registered = 0
        self.loaded = False  # cupti-python loads libcupti at its first call

    def get_timestamp(self) -> int:
        self.loaded = True
        return 1

    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        self.registered += 1

    def activity_enable(self, kind: int) -> None:
        self.kinds.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.kinds.discard(kind)

    def activity_flush_all(self, flag: int) -> None:
        pass

    def activity_enable_runtime_api(self, cbid: int, on: int) -> None:
        pass

    def activity_enable_driver_api(self, cbid: int, on: int) -> None:
        pass

    def get_callback_name(self, domain: int, cbid: int) -> str:
        name = CALLS.get((domain, cbid))
        if name is None:
            raise RuntimeError("CUPTI_ERROR_INVALID_PARAMETER")
        return name


@pytest.fixture
def parts(shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeCuptiPython, FakeCupti]:
    module = FakeCuptiPython()
    package = types.ModuleType("cupti")
    package.cupti = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", package)
    lib = FakeCupti(shim)
    maps: list[str | None] = ["/site/nvidia/cu13/lib/libcupti.so.13"]
    monkeypatch.setattr(pycupti_mod, "mapped_libcupti",
                        lambda: maps[0] if module.loaded else None)
    monkeypatch.setattr(pycupti_mod, "load_libcupti", lambda path: lib)
    monkeypatch.setattr(pycupti_mod, "load_shim", lambda: shim)
    detach.reset(lib, shim)  # the shim is shared by the module's tests
    return module, lib


def test_cupti_detaches_at_the_next_cuda_call_after_the_capture(
        parts: tuple[FakeCuptiPython, FakeCupti]) -> None:
    module, lib = parts
    cap = PyCuptiCapture(GpuSettings())
    cap.start()
    assert module.kinds and lib.subscribed is None  # nothing subscribed while capturing
    cap.stop()
    assert module.kinds == set()
    assert cap.settings_for_manifest()["cupti_detach"] == "armed"
    assert lib.finalized == 0
    lib.api_call()  # the program's next CUDA call, on its way out
    assert lib.finalized == 1 and cap.diagnostics == ()


def test_a_new_capture_calls_off_a_detach_that_has_not_run(
        parts: tuple[FakeCuptiPython, FakeCupti]) -> None:
    _, lib = parts
    cap = PyCuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    cap.start()  # before any CUDA call: the armed detach is called off, its callback unsubscribed
    assert lib.unsubscribed and lib.subscribed is None
    lib.api_call()
    assert lib.finalized == 0
    cap.stop()
    lib.api_call()
    assert lib.finalized == 1


def test_another_subscriber_keeps_cupti_attached_with_a_note(
        parts: tuple[FakeCuptiPython, FakeCupti]) -> None:
    _, lib = parts
    cap = PyCuptiCapture(GpuSettings())
    cap.start()
    lib.subscribed = 0x1234  # e.g. the framework's own profiler
    cap.stop()
    assert cap.settings_for_manifest()["cupti_detach"] == "not armed"
    assert [d.code for d in cap.diagnostics] == ["cupti_stays_attached"]
    assert "TEARDOWN_CUPTI=1" in cap.diagnostics[0].message
    lib.api_call()
    assert lib.finalized == 0
    cap.start()
    cap.stop()
    assert len(cap.diagnostics) == 1  # said once, however many captures


def test_libcupti_not_in_the_memory_map_is_said_once(
        parts: tuple[FakeCuptiPython, FakeCupti], monkeypatch: pytest.MonkeyPatch) -> None:
    _, lib = parts
    monkeypatch.setattr(pycupti_mod, "mapped_libcupti", lambda: None)
    cap = PyCuptiCapture(GpuSettings())
    cap.start()
    cap.stop()
    assert [d.code for d in cap.diagnostics] == ["cupti_stays_attached"]
    assert "memory map" in cap.diagnostics[0].message
    assert cap.settings_for_manifest()["cupti_detach"] == "not armed" and lib.subscribed is None


def test_switched_off_it_neither_loads_nor_subscribes(
        parts: tuple[FakeCuptiPython, FakeCupti]) -> None:
    module, lib = parts
    cap = PyCuptiCapture(GpuSettings(detach=False))
    cap.start()
    cap.stop()
    assert cap.settings_for_manifest()["cupti_detach"] == "off"
    assert not module.loaded and lib.subscribed is None and cap.diagnostics == ()
