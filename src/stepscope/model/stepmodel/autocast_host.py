"""The host work PyTorch's autocast adds to a step: the casts of the fp32 inputs of each
lower-precision op, and their backward.

Under ``torch.autocast(dtype=torch.bfloat16)`` each matmul or convolution casts its fp32
arguments first: the layer's weight and bias once a step (autocast caches the casts of leaf
parameters until the region ends), and an fp32 activation where one comes in (the net's input;
the loss's ``.float()`` casts back). Each parameter's cast has a backward that casts its
gradient back to fp32. Every cast is a dispatcher call, an allocation, a copy kernel and, for
the parameters, an autograd node: host work on the thread that issues it, which the kernels'
speed-up does not remove. Where the TF32 step was already close to host-bound, bf16 autocast
can make the step slower than TF32 (docs/accuracy.md, "Autocast's casts on the host").

Counted from the fp32 step: the forward layers are the runs of fp32 matmul/conv launches on the
thread that launches the first of them (a cuDNN convolution may launch several kernels; a run
ends at any other launch, so two layers back to back with nothing between count as one); the
backward's casts go to the other threads that launch such kernels (autograd's). Per layer
:data:`PARAMS_PER_LAYER` parameters (weight and bias), :data:`EXTRA_CASTS` more in the forward
(the input's, the output's), one backward cast per parameter cast.

Measured on an NVIDIA H100's host (16-core Intel Xeon, torch 2.11, Python 3.12; docs/accuracy.md,
"Autocast's casts on the host"): on the 12-layer MLP of ``deep_mlp_fp32``, host-bound with TF32
and with bf16 autocast, bf16 added 51 cast kernels a step and 0.71-1.06 ms to the step in
programs of their own and 0.75-0.76 ms in the suite's timing: 14-21 us a cast, median 15
(:data:`CAST_NS`). ``benchmarks/scenarios/host_floor_probe.py`` (each variant on tiny tensors,
so the step is its host's dispatch) measured 23-31 us a cast on three nets (31, 51 and 15
casts), in a process of eight models whose host ran 1.3x slower than the programs' (18-24 us
scaled). Another CPU gives another figure, and the assumption says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.model.stepmodel.steps import I64, B, HostKind, StepModel

CAST_NS = 15_000  # host cost of one autocast cast (or its backward), see the module docstring
PARAMS_PER_LAYER = 2  # weight and bias
EXTRA_CASTS = 2  # the forward's fp32 input cast and the output's cast back to fp32


@dataclass(frozen=True)
class AutocastCasts:
    """The casts bf16 autocast would add to one step, and where their host work goes."""

    layers: int  # forward runs of fp32 matmul/conv launches
    forward: int  # casts in the forward (parameters and activations)
    backward: int  # casts of the parameters' gradients (0: no backward thread seen)
    events: I64  # host events whose dispatch ``pre`` takes the casts
    cast_ns: I64  # the ns each of ``events`` takes more

    @property
    def total(self) -> int:
        return self.forward + self.backward

    def describe(self) -> str:
        back = (f" and {self.backward} casts of their gradients back to fp32 in the backward"
                if self.backward else "")
        return (f"bf16 autocast's casts on the host: {self.forward} casts a step in the forward "
                f"({self.layers} layers: weight and bias each, the input and the output){back}, "
                f"{CAST_NS / 1e3:.0f} us each ({self.total * CAST_NS / 1e6:.2f} ms a step; "
                "measured on an H100's 16-core Xeon host: 14-21 us in host-bound steps); their "
                "copy kernels' GPU time is left out")


def _runs(cand: B) -> list[int]:
    """Start positions of the runs of True in ``cand``."""
    starts = np.flatnonzero(cand & ~np.concatenate(([False], cand[:-1])))
    return [int(i) for i in starts]


def autocast_casts(m: StepModel, candidate: B) -> AutocastCasts | None:
    """The casts of ``m``'s step under bf16 autocast; ``candidate``: per GPU op, an fp32
    matmul/conv kernel that autocast would run in bf16. None where no run is found."""
    h, o = m.host, m.ops
    trig = o.trigger[candidate]
    if trig.size == 0:
        return None
    launch = h.kind == HostKind.LAUNCH
    trig_ev = np.zeros(h.size, dtype=bool)
    trig_ev[trig] = True
    first = int(trig[np.argmin(h.start[trig])])
    fwd_thread = int(h.thread[first])
    events: list[int] = []
    amounts: list[int] = []
    layers = 0
    back_runs: list[int] = []
    for t in np.unique(h.thread[trig]).tolist():
        ev = np.flatnonzero(launch & (h.thread == t))
        starts = [int(ev[i]) for i in _runs(trig_ev[ev])]
        if int(t) == fwd_thread:
            layers = len(starts)
            for k, e in enumerate(starts):
                events.append(e)
                amounts.append((PARAMS_PER_LAYER + (EXTRA_CASTS if k == 0 else 0)) * CAST_NS)
        else:
            back_runs += starts
    if layers == 0:
        return None
    backward = PARAMS_PER_LAYER * layers if back_runs else 0
    if back_runs:
        share = np.full(len(back_runs), backward // len(back_runs), dtype=np.int64)
        share[: backward % len(back_runs)] += 1
        events += back_runs
        amounts += [int(s) * CAST_NS for s in share]
    return AutocastCasts(layers, PARAMS_PER_LAYER * layers + EXTRA_CASTS, backward,
                         np.asarray(events, dtype=np.int64), np.asarray(amounts, dtype=np.int64))


def with_casts(m: StepModel, casts: AutocastCasts) -> StepModel:
    """``m`` with the casts' host work before the launches that take them; a launch a CUDA
    graph replays (no cost of its own left, ``edits.graph_regions``) takes none: the graph
    holds its casts."""
    own = m.host.own[casts.events]
    add = np.where(own > 0, casts.cast_ns, 0)
    pre = m.host.pre.copy()
    np.add.at(pre, casts.events, add)
    return m.with_host(pre=pre)


__all__ = ["AutocastCasts", "CAST_NS", "autocast_casts", "with_casts"]
