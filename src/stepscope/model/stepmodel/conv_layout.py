"""cuDNN's layout transposes around NCHW convolutions with TF32 or bf16, which channels_last
removes.

With TF32 or bf16, cuDNN runs a convolution as NHWC tensor-core kernels: tensors in PyTorch's
default NCHW layout are transposed to NHWC and back around each of them (``nchwToNhwc`` /
``nhwcToNchw`` kernels). The fp32 kernels of an NCHW step need none. Measured on an NVIDIA
H100 (``benchmarks/conv_layouts.py``, cuDNN 9.19, torch 2.11): 9 transposes per layer's
forward and both backward passes, on each of four shapes, and none on channels_last tensors;
on ``conv_fp32``'s TF32 and bf16 steps, 50 transposes a step for its 6 convolutions (0.5-0.7 ms
of GPU time and 50 more launches than with channels_last).

Their GPU time is in the NCHW conv ratios (``gemm_speedups.py`` times the whole call), so the
TF32 and bf16 options need only their launches: :data:`PER_PASS` a pass (forward, data
gradient, weight gradient), :data:`TRANSPOSE_NS` each, before each conv layer's run of
launches (the forward's on its thread, the backward's spread over the other threads' runs
that hold a convolution, as ``autocast_host.layer_runs`` finds them). The ``channels_last``
option has no transposes, and its convolutions take the channels_last ratio where one was
measured (``speedups.conv_bf16_nhwc``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.model.stepmodel.autocast_host import add_host, layer_runs, spread
from stepscope.model.stepmodel.steps import I64, B, StepModel

PER_PASS = 3  # transposes per conv pass: forward, data gradient, weight gradient (9 a layer)
# host cost of one transpose's launch inside cuDNN's call. Measured on the H100 host (16-core
# Xeon, docs/accuracy.md): conv_fp32's full-size TF32 step called 0.13 ms longer than its fp32
# one (54 transposes: 2.4 us each); its bf16 step on tiny tensors 0.07-0.25 ms longer than
# bf16 + channels_last (1.4-4.8 us). Not the run's own launch calls: a recorded run's carry the
# capture's cost (6.7 us on one H100 run)
TRANSPOSE_NS = 2_500


@dataclass(frozen=True)
class Transposes:
    """The layout transposes TF32 or bf16 would add to an NCHW conv step, as host launches."""

    layers: int  # conv layers (forward runs of fp32 conv launches)
    count: int  # transposes a step
    events: I64  # host events whose ``pre`` takes them
    ns: I64  # the ns each of ``events`` takes more

    def describe(self) -> str:
        return (f"NCHW convolutions with TF32 or bf16: cuDNN transposes to NHWC and back, "
                f"{self.count} transposes a step for {self.layers} conv layers ({3 * PER_PASS} a "
                f"layer, measured on an H100), {TRANSPOSE_NS / 1e3:.1f} us of launch each on "
                "the host (their GPU time is in the conv ratios); channels_last has none")


def layout_transposes(m: StepModel, candidate: B, conv: B) -> Transposes | None:
    """The transposes of ``m``'s conv layers: the layer runs of ``candidate`` (per GPU op, an
    fp32 matmul/conv kernel that TF32 or bf16 would run; ``autocast_host.layer_runs``) that
    hold a convolution of ``conv`` (cuDNN may run one as GEMM kernels, so a conv-only run
    would split a layer); None where there is none."""
    runs = layer_runs(m, candidate)
    if runs is None:
        return None
    is_conv = np.zeros(m.host.size, dtype=bool)
    is_conv[m.ops.trigger[conv & candidate]] = True
    forward = [r[0] for r in runs.forward if is_conv[list(r)].any()]
    backward = [r[0] for r in runs.backward if is_conv[list(r)].any()]
    if not forward:
        return None
    layers = len(forward)
    counts = [PER_PASS] * layers
    if backward:
        counts += spread(2 * PER_PASS * layers, len(backward))
    return Transposes(layers, sum(counts), np.asarray(forward + backward, dtype=np.int64),
                      np.asarray(counts, dtype=np.int64) * TRANSPOSE_NS)


def with_transposes(m: StepModel, t: Transposes) -> StepModel:
    return add_host(m, t.events, t.ns)


__all__ = ["PER_PASS", "TRANSPOSE_NS", "Transposes", "layout_transposes", "with_transposes"]
