"""Detach CUPTI from the process once a capture has ended.

Disabling every activity kind is not enough: CUPTI, once initialised, keeps its hooks in every
CUDA runtime and driver call for the rest of the process. Measured on the H100 (docs/benchmarks.md):
the uncaptured GPT step ran 8% slower after one capture had ended than before it, and PyTorch
reported the same effect for its profiler (it now tears CUPTI down after profiling on CUDA >=
12.6). ``cuptiFinalize`` detaches CUPTI; NVIDIA's documented safe place to call it is the exit of
a CUDA API call, from a CUPTI callback. So at the end of a capture (buffers flushed, activities
off) ``arm`` subscribes the shim's ``ss_callback`` to the runtime and driver domains, and
the program's next CUDA call detaches CUPTI on its way out — in C, without the GIL. A new capture
in the same process first calls off a detach that has not happened yet (``reset``); CUPTI
initialises itself again on its next call.

Not armed where it could do harm: CUPTI older than 12.6 (``cuptiFinalize`` crashed with CUDA
graphs there), a program that launched CUDA graphs while CUPTI was attached (the shim counts
the graph launch calls it records: detaching then made the next launch of such a graph fail
with CUDA_ERROR_LAUNCH_FAILED on the H100, libcupti 13.0, JAX 0.11.2's command buffers, 2026-11-26;
``STEPSCOPE_CUPTI_DETACH=always`` detaches anyway, to check that on a GPU), or another CUPTI
client subscribed in the process (the subscription fails).
PyTorch 2.11's profiler keeps its subscription after its capture unless Kineto's
``TEARDOWN_CUPTI=1`` is set before torch is imported; with it set, stepscope's later windows
detached (checked on the H100 2026-11-25: 18 stepscope captures, each after a torch.profiler
capture in the same process, none with ``cupti_stays_attached``; docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from stepscope.capture.cupti import layouts as L

FIRST_SAFE_VERSION = 24  # CUPTI API version of CUDA 12.6 (cupti_version.h)
GRAPHS_STAY = ("CUPTI stays attached after the window: the program launched CUDA graphs under it "
               "({n} launches), and detaching CUPTI then makes later launches of those graphs "
               "fail (CUDA_ERROR_LAUNCH_FAILED, seen on an H100 with JAX's command buffers; "
               "PyTorch's profiler keeps CUPTI for CUDA graphs too). The program's later CUDA "
               "calls keep CUPTI's small per-call cost")
DETACHED, FAILED, RUNNING = 3, 4, 2
_STATES = {0: "idle", 1: "armed: at the next CUDA call", RUNNING: "detaching", DETACHED: "detached",
           FAILED: "cuptiFinalize failed"}


def state(shim: ctypes.CDLL) -> str:
    """Where the detach is (``detached`` once the program's next CUDA call has run)."""
    rc = ctypes.c_int(0)
    st = int(shim.ss_detach_state_get(ctypes.byref(rc)))
    text = _STATES.get(st, f"state {st}")
    return f"{text} ({rc.value})" if st == FAILED else text


def reset(lib: Any, shim: ctypes.CDLL, wait_s: float = 2.0) -> None:
    """Before a capture starts: call off a detach armed by an earlier capture of this process
    (and unsubscribe its callback), or wait for one under way."""
    deadline = time.monotonic() + wait_s
    while True:
        sub = ctypes.c_void_p()
        st = int(shim.ss_detach_reset(ctypes.byref(sub)))
        if sub.value and getattr(lib, "cuptiUnsubscribe", None) is not None:
            lib.cuptiUnsubscribe(sub)
        if st != RUNNING or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def arm(lib: Any, shim: ctypes.CDLL, version: int, subscriber: ctypes.c_void_p | None = None
        ) -> str | None:
    """Arm the detach; None when armed, else why not (said in a diagnostic). ``subscriber``: the
    capture's own subscription to ``ss_callback`` (its call records), reused (CUPTI allows one
    subscriber); it is unsubscribed where the detach cannot be armed."""
    why = _arm(lib, shim, version, subscriber)
    if why is not None and subscriber is not None and subscriber.value:
        lib.cuptiUnsubscribe(subscriber)
    return why


def _arm(lib: Any, shim: ctypes.CDLL, version: int, sub: ctypes.c_void_p | None) -> str | None:
    if version < FIRST_SAFE_VERSION:
        return (f"CUPTI {version} is older than CUDA 12.6's, whose cuptiFinalize is safe with CUDA "
                "graphs: CUPTI stays attached after the window, and the program's CUDA calls "
                "after it keep CUPTI's hooks (slower)")
    needed = ("cuptiFinalize", "cuptiSubscribe", "cuptiEnableDomain")
    if any(getattr(lib, name, None) is None for name in needed):
        return "this libcupti cannot detach (no cuptiFinalize/cuptiSubscribe): CUPTI stays attached"
    if sub is None or not sub.value:
        sub = ctypes.c_void_p()
        rc = lib.cuptiSubscribe(ctypes.byref(sub), ctypes.cast(shim.ss_callback, ctypes.c_void_p),
                                None)
        if rc != 0:
            return (f"CUPTI could not be detached after the window (cuptiSubscribe failed with "
                    f"{rc}: another CUPTI client in this process?): the program's CUDA calls "
                    "after the window keep CUPTI's hooks (slower). If it is PyTorch's profiler: "
                    "set TEARDOWN_CUPTI=1 before torch is imported, and it detaches after its "
                    "captures")
    shim.ss_detach_arm(ctypes.cast(lib.cuptiFinalize, ctypes.c_void_p), sub)
    for domain in (L.DOMAIN_RUNTIME_API, L.DOMAIN_DRIVER_API):
        lib.cuptiEnableDomain(1, sub, domain)
    return None


class Detacher:
    """A backend's detach around its captures, for both CUPTI backends: ``before_start`` calls
    off an earlier capture's detach that has not run yet; ``after_stop`` arms the detach (when
    switched on) and returns why it could not be (None when armed); ``note`` says where it
    stands, for the manifest."""

    def __init__(self, lib: Any, shim: ctypes.CDLL, version: int, enabled: bool) -> None:
        self.lib, self.shim, self.version, self.enabled = lib, shim, version, enabled
        self.note = "not yet" if enabled else "off"

    def before_start(self) -> None:
        reset(self.lib, self.shim)

    def after_stop(self, subscriber: ctypes.c_void_p | None = None,
                   with_graphs: bool = False) -> str | None:
        """``subscriber``: the capture's own subscription, if it made one (reused, or let go).
        ``with_graphs``: detach even when the program launched CUDA graphs under CUPTI."""
        graphs = int(self.shim.ss_api_graph_launches())
        if not self.enabled or (graphs and not with_graphs):
            if subscriber is not None and subscriber.value:
                self.lib.cuptiUnsubscribe(subscriber)
            if self.enabled:
                self.note = "not armed: CUDA graphs"
                return GRAPHS_STAY.format(n=graphs)
            return None
        why = arm(self.lib, self.shim, self.version, subscriber)
        self.note = "armed" if why is None else "not armed"
        return why


__all__ = ["FIRST_SAFE_VERSION", "GRAPHS_STAY", "Detacher", "arm", "reset", "state"]
