"""What a GPU kernel does, read from its name: category, tensor-core use, input precision.

Rules are ordered; the first category whose pattern matches wins. They were written against
the kernels of real PyTorch traces on Hopper and Ampere (cuBLASLt ``nvjet``, CUTLASS 2/3,
``xmma``, cuDNN runtime-fusion SDPA, FFT and implicit-GEMM convolution, NCCL, ATen, fbgemm,
Triton/Inductor) and public kernel-name conventions; the lists in older profilers
(tb_plugin, XProf) predate most of these.

Conventions
-----------
* ``precision`` is the *input* data type of the kernel's math, taken from the leftmost type
  token in the name (``bf16``, ``c10::Half``, ``float``, ``tf32``, ``e4m3`` ...), which is
  the operand type in xmma/CUTLASS names and the scalar type in ATen template names. When the
  name states no type, MMA-shape prefixes decide (``s1688`` on sm80+ = tf32, ``h16816`` /
  ``884`` = fp16); otherwise it is ``None``. Integer-only kernels and NCCL byte transfers
  have ``None``.
* ``fp16/bf16`` means "a 16-bit float, the name does not say which": cuDNN's generated SDPA
  kernels say ``f16`` for both (a bf16 autocast run produces ``..._wgmma_f16_...``), and
  FlashAttention/fmha kernels whose name carries no type only exist for those two.
* ``nvjet_*`` (cuBLASLt's Hopper/Blackwell GEMMs) name tile shape, cluster, raster order
  (``h``/``v``), epilogue (``bz`` = beta zero, ``bias``), cooperative split (``coopA``/``B``),
  split-K and operand layouts (``TNT``), never the data type: the same family runs fp8 and
  16-bit GEMMs. They are tensor-core GEMMs with ``precision=None``.
* ``tensor_cores`` is only decided for gemm/conv/attention (and ``None`` for ``other``);
  every other category is ``False``. ``None`` means the name does not tell (Triton templates,
  GEMMs with no type and no MMA marker).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

CATEGORIES: tuple[str, ...] = (
    "gemm", "conv", "attention", "communication", "elementwise", "reduction", "normalization",
    "softmax", "optimizer", "embedding", "memory", "sort", "other",
)
PRECISIONS: tuple[str, ...] = (
    "fp64", "fp32", "tf32", "fp16", "bf16", "fp16/bf16", "fp8", "fp4", "int8",
)
MATMUL = frozenset({"gemm", "conv", "attention"})


@dataclass(frozen=True)
class KernelClass:
    category: str
    tensor_cores: bool | None
    precision: str | None


def _any(*alternatives: str) -> re.Pattern[str]:
    """Case-insensitive regex matching any of ``alternatives`` (each a regex)."""
    return re.compile("|".join(alternatives), re.IGNORECASE)


_NORM = _any(
    r"layer_?norm", r"rms_?norm", r"batch_?norm", r"group_?norm", r"instance_?norm",
    r"\bbn_(fw|bw)", r"::bn_", "gammabetabackward", "rowwisemoments", r"cuapply(layer|rms)norm",
    "cucomputegradinput", "cucomputepartgradgammabeta",
)
_SOFTMAX = _any("softmax")

# (category, pattern); the first match wins. Patterns see the signature head (name and
# template arguments), so specific families come before generic words.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("communication", _any(
        "nccl", "rccl", "msccl", "nvshmem", r"all_?reduce", r"all_?gather", r"reduce_?scatter",
        r"all_?to_?all", "sendrecv", "cross_device_reduce", r"custom_?ar_", "lamport")),
    ("attention", _any(
        r"flash_?attn", "flash_fwd", "flash_bwd", "flash::", "flashinfer", "fmha", "sdpa",
        "attention", "_attn_", "mha_fwd", "mha_bwd", "xformers", "mem_eff", "dot_do_o",
        "convert_dq")),
    ("embedding", _any(
        "embedding", "_embs", "embs_", r"index_?select", "vectorized_gather_kernel",
        "compute_grad_weight", "sum_and_scatter", "krn_partial", "compute_num_of_partial_segments",
        "bounds_check_indices", "linearize_index",
        r"fbgemm_gpu::\w*(permute|jagged|lengths|offsets|indices|index)")),
    ("optimizer", _any(
        "multi_tensor_apply", "multi_tensor_", "adam", "sgd_", "_sgd", "adagrad", "rmsprop",
        "fused_optim", "lamb_")),
    ("normalization", _NORM),
    ("softmax", _SOFTMAX),
    ("memory", _any("nchwtonhwc", "nhwctonchw", "nchw2nhwc", "nhwc2nchw")),
    ("conv", _any(
        r"conv(?!ert)", "fprop", "dgrad", "wgrad", "winograd", "fft", r"[sh]cudnn", r"\d+cudnn",
        "cask_cudnn", "cudnn::cnn", "cutlass_cudnn", r"implicit_?gemm", "im2col", "col2im",
        "vol2col", "flip_filter", "pointwise_mult_and_sum_complex")),
    ("gemm", _any(
        r"(?<!fb)gemm", "gemv", "nvjet", "matmul", "cutlass", "cijk_", "xmma", "wgmma",
        "tcgen05", "splitkreduce", "cublaslt", "epilogue::impl", r"\bbmm_", "_bmm",
        r"deep_?gemm", "scaled_mm")),
    ("conv", _any("cudnn")),
    ("sort", _any("sort", "topk", "unique", "deviceselect", "devicecompact", r"partition_?kernel")),
    ("memory", _any(
        "memcpy", "memset", "copy", "fill", r"cat_?array", "transpose", "index_put", "index_kernel",
        "scatter", r"\bpad_", "flip_kernel")),
    ("reduction", _any(
        "reduce", "reduction", "scan", "cumsum", "cumprod", "nll_loss", "cross_entropy", "pool",
        "argmax", "argmin", "histogram", "bincount", "norm_kernel", "dot_kernel", "nrm2", "asum",
        "logsumexp", "welford")),
    ("elementwise", _any(
        "elementwise", "pointwise", "activation", "gelu", "relu", "silu", "swiglu", "act_and_mul",
        "dropout", "distribution", "philox", "quantiz", "fp8rowwise", "hfp8", "qparam",
        "eigenmetakernel", "clamp", "functor", "scal_kernel", "axpy_kernel")),
)

# Explicit type tokens; the leftmost in the name wins. Alternatives that can start at the
# same position are listed narrow-first (float8, float16 before float).
_TYPE_TOKENS: tuple[tuple[str, str], ...] = (
    ("fp8", r"e4m3|e5m2|fp8|float8"),
    ("fp4", r"e2m1|fp4|nvf4|mxf4"),
    ("bf16", r"bf16|bfloat16|bfloat"),
    ("tf32", r"tf32|tfloat32"),
    ("fp16", r"fp16|float16|(?<![a-z])half|(?<![bt])f16|h884|h1688|h16816|hgemm|hmma"),
    ("fp64", r"fp64|double|(?<![a-z])f64|dgemm|zgemm|d884|dmma"),
    ("fp32", r"fp32|float|(?<!t)f32|sgemm|[sc]cudnn|cgemm|sgemv"),
    ("int8", r"int8|i8i8|s8s8|u8s8|imma|i16832|i8816"),
)
_TYPE_RX = re.compile(
    "|".join(f"(?P<t{i}>{rx})" for i, (_, rx) in enumerate(_TYPE_TOKENS)), re.IGNORECASE)
_SHAPE_TF32 = _any(r"(cutlass_[89]\d|sm_?[89]\d|sm1\d\d|ampere|hopper|blackwell).*s1688")
_SHAPE_FP16 = _any("s1688", "s16816", "h16816", "884gemm", "s884", "1688gemm")
_XMMA_TF32 = re.compile(r"xmma_.*_tf32", re.IGNORECASE)
_TC_YES = _any(
    "warpgroupsize", "tensorop", r"tensor\d", "hmma", "imma", "dmma", "wgmma", "tcgen05", "utcmma", "nvjet",
    "cutlass3x", "_mma_", "s1688", "s16816", "h16816", "884", "1688", "16816", "16832", "8816",
    "flash", "fmha", "sdpa", r"mi\d+x\d+x\d+")
_TC_NO = _any(
    "simt", "ffma", "sgemm", "dgemm", "cgemm", "gcgemm", "gemv", "scudnn", "fft", "winograd",
    "convolve_sgemm", "wgrad_alg", "splitkreduce", "epilogue::impl", "cask_cudnn", "cudnn::cnn",
    "flip_filter", "pointwise_mult", "dot_do_o", "convert_dq", "reducesplitk", "computeoffsets",
    "im2col", "col2im")
_TENSILE = re.compile(r"Cijk_A[a-z]+_B[a-z]+_([A-Z0-9]+)_")
_TENSILE_TYPES = (
    ("F8", "fp8"), ("I8", "int8"), ("S", "fp32"), ("D", "fp64"), ("H", "fp16"), ("B", "bf16"),
)


def _precision(name: str, category: str) -> str | None:
    m = _TENSILE.search(name)
    if m:
        code = m.group(1)
        return next((p for prefix, p in _TENSILE_TYPES if code.startswith(prefix)), None)
    if category in MATMUL and _XMMA_TF32.search(name):
        return "tf32"  # xmma names give the inputs first (f32f32), then the math type (tf32f32)
    m = _TYPE_RX.search(name)
    if m and m.lastgroup:
        prec = _TYPE_TOKENS[int(m.lastgroup[1:])][0]
        if prec == "fp16" and "cudnn_generated" in name.lower():
            return "fp16/bf16"  # cuDNN's generated kernels say f16 for bf16 too
        if category == "communication" and prec == "int8":
            return None  # NCCL moves bytes as int8_t
        return prec
    if category in MATMUL:
        if _SHAPE_TF32.search(name):
            return "tf32"
        if _SHAPE_FP16.search(name):
            return "fp16"
        if category == "attention" and re.search(r"flash|fmha", name, re.IGNORECASE):
            return "fp16/bf16"
    return None


def _tensor_cores(name: str, category: str, precision: str | None) -> bool | None:
    if category not in MATMUL:
        return None if category == "other" else False
    if precision == "tf32" and not re.search("simt|ffma", name, re.IGNORECASE):
        return True
    if _TC_NO.search(name):
        return False
    if _TC_YES.search(name):
        return True
    if precision in ("fp16", "bf16", "fp16/bf16", "tf32", "fp8", "fp4", "int8"):
        return True
    if precision in ("fp32", "fp64"):
        return False
    return None


_TRITON = re.compile(r"^triton_(poi|red|per|tem|for|spl)_")


def _triton_category(kind: str, name: str) -> str:
    if kind == "tem":
        low = name.lower()
        if "attention" in low:
            return "attention"
        return "conv" if "conv" in low else "gemm"
    if kind in ("red", "per", "spl"):
        if _NORM.search(name):
            return "normalization"
        return "softmax" if _SOFTMAX.search(name) else "reduction"
    return "elementwise"  # poi (pointwise), for (foreach)


def signature_head(name: str) -> str:
    """``name`` without its parameter list: ``void f<T, U>(T*, int)`` -> ``void f<T, U>``.

    Template arguments carry the types a kernel computes in; parameter lists add pointers to
    scales and descriptors that would mislead.
    """
    s = name.replace("(anonymous namespace)", "{anon}")
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


def classify_kernel(name: str) -> KernelClass:
    """Category, tensor-core use and input precision of kernel ``name`` (see module doc)."""
    head = signature_head(name)
    t = _TRITON.match(head)
    if t:
        cat = _triton_category(t.group(1), head)
        return KernelClass(cat, None if cat in MATMUL else False, _precision(head, cat))
    cat = next((c for c, rx in _RULES if rx.search(head)), "other")
    prec = _precision(head, cat)
    return KernelClass(cat, _tensor_cores(head, cat, prec), prec)


def classify_names(names: Sequence[str],
                   seen: dict[str, KernelClass] | None = None) -> list[KernelClass]:
    """``classify_kernel`` for each name, computed once per distinct name (``seen``: a cache
    to share across calls, e.g. the ranks of one run)."""
    seen = {} if seen is None else seen
    out: list[KernelClass] = []
    for n in names:
        kc = seen.get(n)
        if kc is None:
            kc = seen[n] = classify_kernel(n)
        out.append(kc)
    return out
