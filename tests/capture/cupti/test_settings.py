"""Which runtime/driver calls the CUPTI backends record (GpuSettings.keep_call / use_driver)."""

from __future__ import annotations

import sys
import types

import pytest

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.settings import TORCH_DRIVER_CALLS, GpuSettings

RT, DRV = L.DOMAIN_RUNTIME_API, L.DOMAIN_DRIVER_API


def test_without_torch_every_call_that_matters_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    s = GpuSettings()
    assert s.use_driver()
    assert s.keep_call(DRV, "cuLaunchKernel") and s.keep_call(DRV, "cuStreamSynchronize")
    assert s.keep_call(RT, "cudaLaunchKernel_v7000")
    assert not s.keep_call(RT, "cudaGetDevice_v3020") and not s.keep_call(DRV, "cuCtxGetCurrent")


def test_with_torch_only_the_launches_the_runtime_does_not_make(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.delenv("STEPSCOPE_TORCH_DRIVER_CALLS", raising=False)
    s = GpuSettings()
    assert s.torch_driver_calls == TORCH_DRIVER_CALLS and s.use_driver()
    assert s.keep_call(DRV, "cuLaunchKernelEx") and s.keep_call(DRV, "cuLaunchKernel_ptsz")
    assert not s.keep_call(DRV, "cuStreamSynchronize")  # torch syncs through the runtime
    # another framework's (XLA's) graph launches: the detach must know of them
    assert s.keep_call(DRV, "cuGraphLaunch") and s.keep_call(DRV, "cuGraphLaunch_ptsz")
    assert s.keep_call(RT, "cudaStreamSynchronize_v3020")
    assert GpuSettings(driver=True).keep_call(DRV, "cuStreamSynchronize")  # explicit: all that matter
    assert not GpuSettings(driver=False).use_driver()


def test_the_benchmark_knob_can_switch_driver_records_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setenv("STEPSCOPE_TORCH_DRIVER_CALLS", "")
    assert not GpuSettings().use_driver()
    monkeypatch.setenv("STEPSCOPE_TORCH_DRIVER_CALLS", "cuLaunchKernelEx")
    s = GpuSettings()
    assert s.keep_call(DRV, "cuLaunchKernelEx") and not s.keep_call(DRV, "cuLaunchKernel")
    assert s.as_dict()["torch_driver_calls"] == ["cuLaunchKernelEx"]


def test_calls_through_callbacks_and_no_sync_records_unless_asked(monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    monkeypatch.delenv("STEPSCOPE_CUPTI_API_VIA", raising=False)
    monkeypatch.delenv("STEPSCOPE_CUPTI_SYNC", raising=False)
    s = GpuSettings()
    assert s.api_via == "callbacks" and not s.sync and L.SYNCHRONIZATION not in s.kinds()
    assert L.RUNTIME not in s.kinds()  # the kept calls come through callbacks, not a kind
    monkeypatch.setenv("STEPSCOPE_CUPTI_API_VIA", "activity")
    monkeypatch.setenv("STEPSCOPE_CUPTI_SYNC", "1")
    s = GpuSettings()
    assert s.api_via == "activity" and s.sync and L.SYNCHRONIZATION in s.kinds()


def test_the_buffer_and_nested_call_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STEPSCOPE_CUPTI_NESTED_DRIVER", "STEPSCOPE_CUPTI_ZEROED_BUFFERS",
                 "STEPSCOPE_CUPTI_PREPARED_BUFFERS"):
        monkeypatch.delenv(name, raising=False)
    s = GpuSettings()
    assert not s.nested_driver and s.zeroed_buffers and s.prepared_buffers == 4
    monkeypatch.setenv("STEPSCOPE_CUPTI_NESTED_DRIVER", "1")
    monkeypatch.setenv("STEPSCOPE_CUPTI_ZEROED_BUFFERS", "0")
    monkeypatch.setenv("STEPSCOPE_CUPTI_PREPARED_BUFFERS", "0")
    s = GpuSettings()
    assert s.nested_driver and not s.zeroed_buffers and s.prepared_buffers == 0
    monkeypatch.setenv("STEPSCOPE_CUPTI_PREPARED_BUFFERS", "many")  # not a count: the default
    assert GpuSettings().prepared_buffers == 4
