"""Sync: loss.item() every step drains a deep queue of kernels."""

from __future__ import annotations

from common import Step, front_body

EXPECTED = "sync_calls"
FIX_REMEDIES = ("remove_round_trip",)  # the remedies it applies (variants.py): the .item()
# is a device-to-host read, which the report offers as remove_round_trip
DESCRIPTION = ("loss.item() + list append every step of a model with a ~400-kernel front "
               "(host-heavy) and a GEMM body (GPU-heavy) -> fixed: the loss stays on the device, "
               "never read")


def build(fixed: bool, device: str) -> Step:
    m = front_body(device)
    history: list[float] = []
    last: list[object] = [None]

    def step() -> None:
        loss = m.forward()
        m.backward_and_step(loss)
        if fixed:
            last[0] = loss.detach()  # kept on the device
        else:
            history.append(loss.item())  # the planted sync
            del history[:-100]

    return Step(step, info={"n_front": m.n_front})
