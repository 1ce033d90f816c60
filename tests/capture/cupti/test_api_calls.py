"""Which runtime/driver calls are recorded, and the switches that say so."""

from __future__ import annotations

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.api_calls import CallPlan
from stepscope.capture.cupti.settings import GpuSettings

NAMES = {(L.DOMAIN_RUNTIME_API, 211): "cudaLaunchKernel_v7000",
         (L.DOMAIN_RUNTIME_API, 3): "cudaGetDevice_v3020",
         (L.DOMAIN_RUNTIME_API, 4): "cudaGetLastError_v3020"}


class Lib:
    def __init__(self, enable_rc: int = 0, per_call: bool = True, fail_off: int = 0) -> None:
        self.enable_rc, self.fail_off, self.calls = enable_rc, fail_off, []  # type: list[Any]
        if per_call:
            self.cuptiActivityEnableRuntimeApi = self._switch

    def cuptiActivityEnable(self, kind: int) -> int:
        self.calls.append(("enable", kind))
        return self.enable_rc

    def _switch(self, cbid: int, on: int) -> int:
        self.calls.append(("switch", cbid, on))
        return 1 if cbid == self.fail_off else 0


def plan() -> CallPlan:
    return CallPlan(GpuSettings(), lambda d, c: NAMES.get((d, c)))


def test_the_domain_goes_on_first_then_the_noise_off() -> None:
    p, lib = plan(), Lib()
    kind, diags = p.enable(lib, L.DOMAIN_RUNTIME_API, str)
    assert kind == L.RUNTIME and diags == []
    assert lib.calls == [("enable", L.RUNTIME), ("switch", 3, 0), ("switch", 4, 0)]
    assert (p.kept, p.off) == (1, 2) and p.names[L.DOMAIN_RUNTIME_API][211] == "cudaLaunchKernel_v7000"


def test_what_cannot_be_switched_is_said() -> None:
    kind, diags = plan().enable(Lib(enable_rc=7), L.DOMAIN_RUNTIME_API, lambda rc: f"error {rc}")
    assert kind is None and diags[0][0] == "cupti_api_unavailable" and "error 7" in diags[0][1]
    kind, diags = plan().enable(Lib(fail_off=4), L.DOMAIN_RUNTIME_API, str)
    assert kind == L.RUNTIME and [c for c, _ in diags] == ["cupti_api_filter"]
    lib = Lib(per_call=False)  # an older CUPTI: the whole domain is recorded
    kind, diags = plan().enable(lib, L.DOMAIN_RUNTIME_API, str)
    assert kind == L.RUNTIME and diags == [] and lib.calls == [("enable", L.RUNTIME)]
