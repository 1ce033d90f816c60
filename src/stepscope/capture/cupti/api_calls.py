"""Which runtime/driver calls a CUPTI capture records, and how CUPTI is told (``--gpu-api
filtered``).

The names of every call of both callback domains are looked up once, when the backend is made
(off the training thread), so that starting only sets switches: calls made while the switches
are being set have no records. The spill's meta keeps the names for decoding at merge.

How: the domain's activity kind on, then every call that does not matter off (the order CUPTI
wants: enabling the kind after the per-call switches would override them). A CUPTI without the
per-call switches records every call of the domain. Switching only the wanted calls on, without
the domain's kind (which cupti_activity.h of CUDA 13.0 describes), was tried on the H100 with
libcupti 13.0.85: CUPTI accepted every switch and recorded no API call at all
(docs/record.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.settings import GpuSettings

MAX_CBID = 1024


class CallPlan:
    def __init__(self, settings: GpuSettings, callback_name: Callable[[int, int], str | None]) -> None:
        self.settings = settings
        self._callback_name = callback_name
        self.names: dict[int, dict[int, str]] = {}  # domain -> cbid -> call name
        self._plans: dict[int, tuple[list[int], list[int]]] = {}  # domain -> (kept, off) cbids
        self.kept = 0  # calls recorded (over the domains switched on)
        self.off = 0  # calls switched off

    def plan(self, domain: int) -> tuple[list[int], list[int]]:
        """The calls of a domain to keep and to leave off."""
        if domain not in self._plans:
            names: dict[int, str] = {}
            kept: list[int] = []
            off: list[int] = []
            for cbid in range(1, MAX_CBID):
                name = self._callback_name(domain, cbid)
                if not name:
                    continue
                names[cbid] = name
                (kept if self.settings.keep_call(domain, name) else off).append(cbid)
            self.names[domain] = names
            self._plans[domain] = (kept, off)
        return self._plans[domain]

    def enable(self, lib: Any, domain: int, error: Callable[[int], str]
               ) -> tuple[int | None, list[tuple[str, str]]]:
        """Switch the domain's records on, and its other calls off. Returns the activity kind
        enabled (None: could not be) and (code, message) diagnostics."""
        kind = L.RUNTIME if domain == L.DOMAIN_RUNTIME_API else L.DRIVER
        fn = getattr(lib, "cuptiActivityEnableRuntimeApi" if domain == L.DOMAIN_RUNTIME_API
                     else "cuptiActivityEnableDriverApi", None)
        kept, off = self.plan(domain)
        rc = lib.cuptiActivityEnable(kind)
        if rc != 0:
            return None, [("cupti_api_unavailable", f"CUPTI {L.KIND_NAMES[kind]} API records "
                           f"unavailable: {error(rc)}")]
        if fn is None:  # older CUPTI: every call of the domain is recorded
            return kind, []
        failed = 0
        self.kept += len(kept)
        for cbid in off:
            if fn(cbid, 0) == 0:
                self.off += 1
            else:
                failed += 1
        if failed:
            return kind, [("cupti_api_filter", f"{failed} {L.KIND_NAMES[kind]} calls could not "
                           "be switched off: their records are kept")]
        return kind, []


__all__ = ["MAX_CBID", "CallPlan"]
