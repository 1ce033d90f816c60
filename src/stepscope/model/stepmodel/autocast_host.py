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
backward's casts go to the other threads that launch such kernels (autograd's). Per layer its
parameters (:func:`layer_params`: weight and bias, or the weight alone where the framework ops
show no bias, or, in a run without framework ops, where the step reduces no gradient by a sum),
:data:`EXTRA_CASTS` more in the forward (the input's, the output's), one backward cast per
parameter cast.

A bias's gradient is a sum of the output's gradient over the batch: PyTorch reduces it in a
kernel of its own, ``at::native::reduce_kernel`` with a ``sum_functor``, once a layer. On an
H100 (2026-11-27, ``stepscope record`` of ``benchmarks/scenarios/deep_mlp_fp32.py`` and
``mlp_nobias_fp32.py``: twelve Linear layers with and without a bias) the first step ran 12 of
them, the second none. A recorded run has the kernels' names but no framework ops: where the
step has a backward and none of its kernels is such a sum, its layers have no bias. Any sum
keeps the default (a loss's ``.sum()``, a broadcast add's gradient look the same).

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
PARAMS_PER_LAYER = 2  # weight and bias (a layer whose framework ops are not known)
# the framework op that launches a layer's GEMM, and the op that adds a convolution's bias
# (PyTorch: ``aten::_convolution`` runs ``aten::add_`` after cuDNN's call when the conv has one)
WITH_BIAS_GEMM = ("aten::addmm",)
WITHOUT_BIAS_GEMM = ("aten::mm",)
CUDNN_CONV = "aten::cudnn_convolution"  # and ``_transpose``: their bias is a separate add
CONV_BIAS_ADD = "aten::add_"
EXTRA_CASTS = 2  # the forward's fp32 input cast and the output's cast back to fp32
# the kernel that reduces a bias's gradient (module docstring): both parts in its name
SUM_REDUCE = ("reduce_kernel", "sum_functor")


@dataclass(frozen=True)
class AutocastCasts:
    """The casts bf16 autocast would add to one step, and where their host work goes."""

    layers: int  # forward runs of fp32 matmul/conv launches
    weights_only: int  # of them, the layers the framework ops show without a bias
    forward: int  # casts in the forward (parameters and activations)
    backward: int  # casts of the parameters' gradients (0: no backward thread seen)
    events: I64  # host events whose dispatch ``pre`` takes the casts
    cast_ns: I64  # the ns each of ``events`` takes more
    no_sums: bool = False  # weights alone because the step reduces no gradient by a sum

    @property
    def total(self) -> int:
        return self.forward + self.backward

    def describe(self) -> str:
        back = (f" and {self.backward} casts of their gradients back to fp32 in the backward"
                if self.backward else "")
        params = ("weight and bias each" if not self.weights_only else
                  "a weight each, no bias" if self.weights_only == self.layers else
                  f"{self.layers - self.weights_only} with weight and bias, "
                  f"{self.weights_only} with a weight alone")
        if self.no_sums:
            params += " (the backward reduces no bias gradient)"
        return (f"bf16 autocast's casts on the host: {self.forward} casts a step in the forward "
                f"({self.layers} layers: {params}, the input and the output){back}, "
                f"{CAST_NS / 1e3:.0f} us each ({self.total * CAST_NS / 1e6:.2f} ms a step; "
                "measured on an H100's 16-core Xeon host: 14-21 us in host-bound steps); their "
                "copy kernels' GPU time is left out")


def _runs(cand: B) -> list[tuple[int, int]]:
    """``[start, end)`` positions of the runs of True in ``cand``."""
    edge = np.diff(np.concatenate(([0], cand.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edge == 1).tolist(), np.flatnonzero(edge == -1).tolist()))


@dataclass(frozen=True)
class LayerRuns:
    """Where a step's layers are, from the GPU ops of a mask: the runs of their launches
    (host event indexes, in order) on the thread that launches the first of them (the forward:
    one run a layer), and on the other threads that launch them (the backward, autograd's)."""

    forward: tuple[tuple[int, ...], ...]
    backward: tuple[tuple[int, ...], ...]


def layer_runs(m: StepModel, mask: B) -> LayerRuns | None:
    """The runs of the launches of ``mask``'s ops (a run ends at any other launch of its
    thread); None where the forward has none."""
    h, o = m.host, m.ops
    trig = o.trigger[mask]
    if trig.size == 0:
        return None
    launch = h.kind == HostKind.LAUNCH
    trig_ev = np.zeros(h.size, dtype=bool)
    trig_ev[trig] = True
    fwd_thread = int(h.thread[int(trig[np.argmin(h.start[trig])])])
    forward: list[tuple[int, ...]] = []
    backward: list[tuple[int, ...]] = []
    for t in np.unique(h.thread[trig]).tolist():
        ev = np.flatnonzero(launch & (h.thread == t))
        runs = [tuple(int(e) for e in ev[a:b]) for a, b in _runs(trig_ev[ev])]
        (forward if int(t) == fwd_thread else backward).extend(runs)
    return LayerRuns(tuple(forward), tuple(backward)) if forward else None


def spread(total: int, n: int) -> list[int]:
    """``total`` in ``n`` integer shares, the remainder to the first ones."""
    share = [total // n] * n
    for i in range(total % n):
        share[i] += 1
    return share


def layer_params(m: StepModel, run: tuple[int, ...], launched: dict[int, str] | None,
                 no_sums: bool = False) -> int:
    """The parameters autocast casts for one forward layer run (host event indexes):
    :data:`PARAMS_PER_LAYER` (weight and bias) unless the framework ops that launched it
    (``launched``: host event -> op name) show a layer without a bias: a GEMM launched by
    ``aten::mm`` (``nn.Linear(bias=False)``; ``aten::addmm`` is one with a bias), or a cuDNN
    convolution whose run the bias add (``aten::add_`` in ``aten::_convolution``) does not
    follow. Other ops (a batched matmul, a depthwise convolution that adds its bias in its own
    kernel, an unknown framework's) keep the default. Without framework ops, ``no_sums`` (a
    backward that reduces no gradient by a sum, module docstring) gives the weight alone."""
    if not launched:
        return 1 if no_sums else PARAMS_PER_LAYER
    names = [launched.get(e, "") for e in run]
    if any(n in WITH_BIAS_GEMM for n in names):
        return PARAMS_PER_LAYER
    if any(n in WITHOUT_BIAS_GEMM for n in names):
        return 1
    if any(n.startswith(CUDNN_CONV) for n in names):
        h = m.host
        last = run[-1]
        later = np.flatnonzero((h.kind == HostKind.LAUNCH) & (h.thread == h.thread[last])
                               & (np.arange(h.size) > last))
        after = launched.get(int(later[0]), "") if later.size else ""
        return PARAMS_PER_LAYER if after == CONV_BIAS_ADD else 1
    return PARAMS_PER_LAYER


def autocast_casts(m: StepModel, candidate: B, launched: dict[int, str] | None = None,
                   sums: bool = True) -> AutocastCasts | None:
    """The casts of ``m``'s step under bf16 autocast; ``candidate``: per GPU op, an fp32
    matmul/conv kernel that autocast would run in bf16; ``launched``: per host event, the name
    of the framework op that launched it, where the run has them (:func:`layer_params`);
    ``sums``: the step runs a kernel that reduces by a sum (:data:`SUM_REDUCE`), which a
    backward without framework ops needs for its layers to count a bias. None where no run is
    found."""
    runs = layer_runs(m, candidate)
    if runs is None:
        return None
    layers = len(runs.forward)
    no_sums = not launched and bool(runs.backward) and not sums
    params = [layer_params(m, r, launched, no_sums) for r in runs.forward]
    events = [r[0] for r in runs.forward]
    amounts = [(p + (EXTRA_CASTS if k == 0 else 0)) * CAST_NS for k, p in enumerate(params)]
    backward = sum(params) if runs.backward else 0
    if runs.backward:
        events += [r[0] for r in runs.backward]
        amounts += [s * CAST_NS for s in spread(backward, len(runs.backward))]
    return AutocastCasts(layers, sum(p < PARAMS_PER_LAYER for p in params),
                         sum(params) + EXTRA_CASTS, backward,
                         np.asarray(events, dtype=np.int64), np.asarray(amounts, dtype=np.int64),
                         no_sums)


def add_host(m: StepModel, events: I64, ns: I64) -> StepModel:
    """``m`` with ``ns`` more host work before each of ``events``; a launch a CUDA graph
    replays (no cost of its own left, ``edits.graph_regions``) takes none: the graph holds
    that work."""
    add = np.where(m.host.own[events] > 0, ns, 0)
    pre = m.host.pre.copy()
    np.add.at(pre, events, add)
    return m.with_host(pre=pre)


def with_casts(m: StepModel, casts: AutocastCasts) -> StepModel:
    """``m`` with the casts' host work before the launches that take them (``add_host``)."""
    return add_host(m, casts.events, casts.cast_ns)


__all__ = ["AutocastCasts", "CAST_NS", "SUM_REDUCE", "LayerRuns", "add_host", "autocast_casts",
           "layer_params", "layer_runs", "spread", "with_casts"]
