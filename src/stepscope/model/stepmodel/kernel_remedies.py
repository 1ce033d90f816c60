"""The remedies that change GPU kernels (part of the catalogue, ``catalog``): ``tf32`` and
``bf16_amp`` (option ``channels_last``) for fp32 matmuls and convolutions without tensor cores,
``larger_batch`` for small-grid kernels, ``comm_overlap`` for exposed communication."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.kernel_names import MATMUL
from stepscope.analysis.kernels import kernel_frame
from stepscope.model.communication import comm_overlap
from stepscope.model.kernels import device_rows, op_names
from stepscope.model.speedups import MIN_KERNEL_NS, conv_bf16_nhwc, speedups_for
from stepscope.model.stepmodel import edits
from stepscope.model.stepmodel.autocast_host import (
    SUM_REDUCE,
    AutocastCasts,
    autocast_casts,
    layer_runs,
    with_casts,
)
from stepscope.model.stepmodel.candidate import Candidate, Option, ms
from stepscope.model.stepmodel.conv_layout import layout_transposes, with_transposes
from stepscope.model.stepmodel.steps import B, OpKind, StepModel
from stepscope.model.tensor_cores import HELPER, TC_HINT


@dataclass(frozen=True)
class TcFactors:
    """Per op of a step model, the speed-up divisors of the precision remedies (1: not a
    candidate), and what they rest on."""

    tf32: np.ndarray
    amp: np.ndarray  # bf16 autocast, NCHW convolutions
    cl: np.ndarray  # bf16 autocast + channels_last (the NHWC conv ratio where measured)
    conv: np.ndarray  # bool: a convolution
    nchw: bool  # the fp32 convolutions run on NCHW tensors (their kernels say so)
    used: dict[str, str]  # the ratios used: name -> description
    launched: dict[int, str] | None = None  # host event -> the framework op that launched it


def tc_factors(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> TcFactors | None:
    """The fp32 matmul and conv kernels without tensor cores of ``m`` and their ratios; a GEMM
    kernel that is part of a convolution (:func:`conv_members`) takes the conv ratios."""
    g = analysis.graph.rank(ra.rank)
    frame = kernel_frame(g)
    o = m.ops
    kj = np.flatnonzero(o.kind == OpKind.KERNEL)
    if frame.num_rows == 0 or kj.size == 0:
        return None
    rows = pa.array(o.row[kj])
    cat, tcs, prec, names, devs, ext = (frame.column(c).take(rows).to_pylist() for c in
                                        ("category", "tensor_cores", "precision", "name",
                                         "device", "external_id"))
    dev_rows = device_rows(ra)
    speed = {d: speedups_for(r) for d, r in dev_rows.items()}
    nhwc = {d: conv_bf16_nhwc(r) for d, r in dev_rows.items()}
    cand = np.zeros(o.size, dtype=bool)
    kind = np.full(o.size, "", dtype=object)
    for i, j in enumerate(kj.tolist()):
        n = str(names[i])
        if (cat[i] in MATMUL and tcs[i] is False and prec[i] == "fp32"
                and not TC_HINT.search(n) and not HELPER.search(n)
                and speed.get(int(devs[i] or 0)) is not None):
            cand[j], kind[j] = True, cat[i]
    if not cand.any():
        return None
    is_conv = cand & (kind == "conv")
    conv_names = [str(names[i]).lower() for i, j in enumerate(kj.tolist()) if is_conv[j]]
    launched_by = op_names(g)
    ops = {j: launched_by.get(int(e), "") for j, e in zip(kj.tolist(), ext) if e is not None}
    conv = conv_members(m, is_conv, cand & (kind == "gemm"), ops if launched_by else None)
    tf32, amp, clf = np.ones(o.size), np.ones(o.size), np.ones(o.size)
    used: dict[str, str] = {}
    for i, j in enumerate(kj.tolist()):
        sp = speed.get(int(devs[i] or 0))
        if not cand[j] or sp is None:
            continue
        base = "conv" if conv[j] else "gemm"
        tf = sp.get(f"{base}_tf32") if cat[i] != "attention" else None
        half = sp.get(f"{base}_bf16") or sp.get(f"{base}_fp16")
        cl = nhwc.get(int(devs[i] or 0)) if base == "conv" else None
        tf32[j] = tf.value if tf else 1.0
        amp[j] = half.value if half else 1.0
        clf[j] = cl.value if cl else amp[j]
        if tf:
            used[f"{base}_tf32"] = tf.describe()
        if half:
            used[f"{base}_bf16"] = half.describe()
        if cl:
            used["conv_bf16_nhwc"] = cl.describe()
    if not ((tf32 > 1).any() or (amp > 1).any()):
        return None
    nchw = any("nchw" in n for n in conv_names) and not any("nhwc" in n for n in conv_names)
    by_event = ({int(o.trigger[j]): n for j, n in ops.items() if n} if launched_by else None)
    return TcFactors(tf32, amp, clf, conv, nchw, used, by_event)


def conv_members(m: StepModel, conv: B, gemm: B, ops: dict[int, str] | None) -> B:
    """Per op of ``m``: a kernel that is part of a convolution, of the candidate conv kernels
    (``conv``) and GEMM kernels (``gemm``). cuDNN runs some convolutions as GEMM kernels (an
    implicit GEMM named ``gemm``, an FFT's complex GEMMs): with TF32 or bf16 the whole call
    changes algorithm, so they take the conv ratio (measured on whole calls), not a matmul's.
    Where the run has framework ops (``ops``: op index -> the name of the op that launched it),
    a GEMM launched by a ``conv`` op; else (a recorded run) a GEMM in a layer run
    (``autocast_host.layer_runs``: one layer's launches back to back) that holds a conv
    kernel."""
    if ops is not None:
        launched: B = np.array(["conv" in ops.get(j, "").lower()
                                for j in range(m.ops.size)], dtype=bool)
        by_op: B = conv | (gemm & launched)
        return by_op
    runs = layer_runs(m, conv | gemm)
    if runs is None:
        return conv
    ev_conv = np.zeros(m.host.size, dtype=bool)
    ev_conv[m.ops.trigger[conv]] = True
    in_conv = np.zeros(m.host.size, dtype=bool)
    for r in runs.forward + runs.backward:
        if ev_conv[list(r)].any():
            in_conv[list(r)] = True
    member: B = conv | (gemm & in_conv[m.ops.trigger])
    return member


# Where the casts are not modelled (``_casts``): what the prediction leaves out
AUTOCAST_HOST_NOTE = (
    "not modelled: the host work of the casts autocast adds (each fp32 input of an autocast "
    "op, and their backward; about 15 us each on an H100's Xeon host, 4-5 a layer): where the "
    "host is close to the predicted step, measure before choosing bf16 over TF32")


def _casts(analysis: Analysis, ra: RankAnalysis, m: StepModel, f: TcFactors
           ) -> AutocastCasts | None:
    """The casts eager PyTorch's autocast would add (``autocast_host``), each layer's
    parameters from the ops that launched it where the run has them; None for another
    framework's program (JAX and TensorFlow cast inside XLA's fused kernels), for a step of
    Inductor's kernels (torch.compile fuses the casts), or where no layer is found."""
    fws = analysis.graph.frameworks
    if fws and fws[0] != "pytorch":
        return None
    names = kernel_frame(analysis.graph.rank(ra.rank)).column("name")
    if pa.types.is_dictionary(names.type):
        names = names.cast(pa.string())
    if names.length() and pc.any(pc.starts_with(names, "triton_")).as_py():
        return None
    return autocast_casts(m, f.amp > 1, f.launched, _sums(m, names))


def _sums(m: StepModel, names: pa.Array | pa.ChunkedArray) -> bool:
    """The step's kernels reduce by a sum (``autocast_host.SUM_REDUCE``), or their names are
    not at hand."""
    rows = m.ops.row[m.ops.kind == OpKind.KERNEL]
    if rows.size == 0 or len(names) == 0 or int(rows.max()) >= len(names):
        return True
    step = names.take(pa.array(rows))
    found = pc.and_(pc.match_substring(step, SUM_REDUCE[0]),
                    pc.match_substring(step, SUM_REDUCE[1]))
    return bool(pc.any(found).as_py())


def precision(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> list[Candidate]:
    f = tc_factors(analysis, ra, m)
    if f is None:
        return []
    o = m.ops
    ev = (f"{int((f.amp > 1).sum())} fp32 matmul/conv kernels without tensor cores per step, "
          f"{ms(float(o.dur[f.amp > 1].sum()))}",
          "speed-ups: " + "; ".join(f"{k} {v}" for k, v in sorted(f.used.items())))
    casts = _casts(analysis, ra, m, f)
    trans = layout_transposes(m, f.amp > 1, f.conv) if f.nchw else None

    def nchw(x: StepModel) -> StepModel:
        return x if trans is None else with_transposes(x, trans)

    def autocast(x: StepModel) -> StepModel:
        return x if casts is None else with_casts(x, casts)

    layout = (trans.describe(),) if trans is not None else ()
    out = []
    if (f.tf32 > 1).any():
        out.append(Candidate(
            "tf32", "TF32 for the fp32 matmuls and convolutions",
            ("no_tensor_cores",), ev,
            (Option("tf32", "TF32", lambda x: nchw(edits.scale_ops(x, 1.0 / f.tf32))),),
            ("the speed-ups of benchmarks/gemm_speedups.py on this GPU model apply to these "
             "kernels' shapes", *layout)))
    opts = [Option("bf16_amp", "bf16 autocast",
                   lambda x: autocast(nchw(edits.scale_ops(x, 1.0 / f.amp))), layout)]
    if f.conv.any():
        cl_measured = "conv_bf16_nhwc" in f.used
        opts.append(Option(
            "channels_last", "bf16 autocast + channels_last",
            lambda x: autocast(edits.scale_ops(x, 1.0 / f.cl)),
            ("channels_last: the bf16 conv ratio measured on channels_last tensors "
             "(benchmarks/conv_layouts.py), no layout transposes",) if cl_measured else
            ("channels_last: no separate speed-up measured on this GPU model; the bf16 conv "
             "ratio (NCHW) is used, a lower bound; no layout transposes",)))
    out.append(Candidate(
        "bf16_amp", "bf16 autocast for the matmuls and convolutions",
        ("no_tensor_cores",), ev, tuple(opts),
        ("bf16 autocast: the measured bf16/fp32 ratios apply; elementwise kernels unchanged",
         AUTOCAST_HOST_NOTE if casts is None else casts.describe())))
    return out


def larger_batch(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> Candidate | None:
    """Kernels whose grid leaves SMs idle (``sm_coverage`` < 1): with a grid (or a batch)
    that fills the GPU, the same work takes ``dur * coverage``."""
    frame = kernel_frame(analysis.graph.rank(ra.rank))
    o = m.ops
    kj = np.flatnonzero((o.kind == OpKind.KERNEL) & ~o.comm & (o.dur > MIN_KERNEL_NS))
    if frame.num_rows == 0 or kj.size == 0:
        return None
    rows = pa.array(o.row[kj])
    cov = np.array([np.nan if v is None else float(v)
                    for v in frame.column("sm_coverage").take(rows).to_pylist()])
    cat = frame.column("category").take(rows).to_pylist()
    small = (cov < 1.0) & ~np.isnan(cov) & np.array([c != "communication" for c in cat])
    if not small.any():
        return None
    factor = np.ones(o.size)
    factor[kj[small]] = cov[small]
    sel = kj[small]
    return Candidate(
        "larger_batch", "Fill the GPU: a larger batch, or wider grids, for the small-grid kernels",
        ("small_grid",),
        (f"{sel.size} kernel launches per step leave SMs idle (median coverage "
         f"{float(np.median(cov[small])) * 100:.0f}% of the SMs), {ms(float(o.dur[sel].sum()))}",),
        (Option("larger_batch", "fill the SMs", lambda x: edits.scale_ops(x, factor)),),
        ("a grid that covers every SM runs the same work in the kernel's time x its SM "
         "coverage (per sample, for a larger batch)",))


COMM_OPTION = {"overlap": "overlap with the backward (gradient buckets)",
               "overlap_bf16": "overlap + bf16 compression of the reductions",
               "remove": "remove the collective the host waits for"}


def comm_overlap_remedy(analysis: Analysis, ra: RankAnalysis, m: StepModel
                        ) -> Candidate | None:
    """The exposed-communication remedies of ``model.comm_remedies`` (overlap in buckets,
    bf16 compression, removing a waited-for collective) as edits: the communication
    kernels of the step lose the exposed time each remedy saves per step (shared out by
    their duration); the replay decides what the rest of the step then overlaps."""
    o = m.ops
    comm = o.comm & (o.kind == OpKind.KERNEL)
    total = float(o.dur[comm].sum())
    if total <= 0:
        return None
    co = comm_overlap(analysis.graph.rank(ra.rank), ra)
    if co is None or not co.remedies or co.n_steps <= 0:
        return None

    def option(kind: str, saving_ns: float) -> Option:
        per_step = saving_ns / co.n_steps
        factor = np.where(comm, max(0.0, 1.0 - per_step / total), 1.0)

        def apply(x: StepModel) -> StepModel:
            return edits.scale_ops(x, factor)

        return Option(kind, COMM_OPTION.get(kind, kind), apply)

    opts = tuple(option(r.kind, r.saving_ns) for r in co.remedies if r.saving_ns > 0)
    if not opts:
        return None
    return Candidate(
        "comm_overlap", "Overlap (or compress) the exposed communication",
        ("exposed_communication",),
        (f"{int(comm.sum())} communication kernels per step, {ms(total)}; exposed "
         f"{ms(co.exposed_ns / co.n_steps)} per step",),
        opts, ("each option's saving is model.comm_remedies' (Hockney model, SM contention: "
               "docs/rules/exposed_communication.md), taken off the communication kernels",))


__all__ = ["COMM_OPTION", "TcFactors", "comm_overlap_remedy", "larger_batch", "precision",
           "tc_factors"]
