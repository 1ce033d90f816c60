"""What a CUDA/HIP runtime or driver API call does, from its name; which GPU kernels are
communication (NCCL/RCCL and other collective kernels), from theirs.

Shared by the importers, capture, the store's producers and the analyses so that
``api_calls.kind`` and "a communication kernel" mean the same thing whatever produced the run. Names are matched case-sensitively on their
documented spelling (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``hipMemcpyAsync``...).
"""

from __future__ import annotations

import re

from stepscope.schema_enums import ApiKind

# A communication kernel, by name: NCCL/RCCL kernels, and collectives outside them (torch's
# symmetric-memory multimem_all_reduce_kernel ...). ``analysis.busy`` and
# ``store.produce.collectives`` both use this one test.
COMM_KERNEL = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv",
                         re.IGNORECASE)

_PREFIXES = ("cuda", "cu", "hip")

# suffix after the vendor prefix -> kind; checked in order, first match wins
_RULES: tuple[tuple[str, ApiKind], ...] = (
    ("GraphLaunch", ApiKind.GRAPH_LAUNCH),
    ("LaunchKernel", ApiKind.LAUNCH),
    ("LaunchCooperativeKernel", ApiKind.LAUNCH),
    ("LaunchHostFunc", ApiKind.LAUNCH),
    ("ExtLaunchKernel", ApiKind.LAUNCH),
    ("ModuleLaunchKernel", ApiKind.LAUNCH),
    ("LaunchGrid", ApiKind.LAUNCH),
    ("DeviceSynchronize", ApiKind.SYNC),
    ("CtxSynchronize", ApiKind.SYNC),
    ("StreamSynchronize", ApiKind.SYNC),
    ("EventSynchronize", ApiKind.SYNC),
    ("StreamWaitEvent", ApiKind.EVENT),  # GPU-side wait, does not block the host
    ("Memset", ApiKind.MEMSET),
    ("Memcpy", ApiKind.MEMCPY),
    ("MemPrefetch", ApiKind.MEMCPY),
    ("Free", ApiKind.FREE),
    ("MemRelease", ApiKind.FREE),
    ("Malloc", ApiKind.ALLOC),
    ("MemAlloc", ApiKind.ALLOC),
    ("MemCreate", ApiKind.ALLOC),
    ("HostAlloc", ApiKind.ALLOC),
    ("HostRegister", ApiKind.ALLOC),
    ("Event", ApiKind.EVENT),
    ("Stream", ApiKind.STREAM),
)

# Calls that wait for the GPU: explicit syncs, and copies the host must wait for.
# (Async copies from pageable memory are also synchronous for the host; the copy
# analysis decides that from the memcpy record, not from the name.)
_BLOCKING_COPY = ("Memcpy", "Memcpy2D", "Memcpy3D", "MemcpyDtoH", "MemcpyHtoD", "MemcpyDtoD",
                  "MemcpyToSymbol", "MemcpyFromSymbol", "MemcpyWithStream", "MemcpyPeer")


def _suffix(name: str) -> str:
    for p in _PREFIXES:
        if name.startswith(p) and len(name) > len(p) and name[len(p)].isupper():
            return name[len(p):]
    return name


def classify_api(name: str) -> ApiKind:
    """Kind of a runtime/driver call (``ApiKind.OTHER`` when unknown)."""
    sfx = _suffix(name)
    for needle, kind in _RULES:
        if needle in sfx:
            return kind
    return ApiKind.OTHER


def is_blocking_call(name: str) -> bool:
    """True for calls that block the calling thread until GPU work finishes."""
    sfx = _suffix(name).split("_")[0]
    if classify_api(name) is ApiKind.SYNC:
        return True
    return sfx in _BLOCKING_COPY or (sfx.startswith("Memcpy") and not sfx.endswith("Async")
                                     and "Async" not in sfx)


def is_communication_kernel(name: str) -> bool:
    """True for a communication (NCCL/RCCL or other collective) kernel's name."""
    return COMM_KERNEL.search(name) is not None
