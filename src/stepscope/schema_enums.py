"""The closed sets of values a run's tables hold (dictionary-encoded string columns whose
allowed values are these members), and the kinds of source a rank can come from.

Part of the run's contract with ``stepscope.schema`` (the tables, their columns and what each
source must provide), kept apart so that each module has one job.
"""

from __future__ import annotations

from enum import Enum


class CopyKind(str, Enum):
    """Direction of a memory copy."""

    HTOD = "HtoD"
    DTOH = "DtoH"
    DTOD = "DtoD"
    HTOH = "HtoH"
    PTOP = "PtoP"
    UNKNOWN = "unknown"


class MemoryKind(str, Enum):
    """Kind of memory at one end of a copy or memset."""

    PAGEABLE = "pageable"
    PINNED = "pinned"
    DEVICE = "device"
    MANAGED = "managed"
    ARRAY = "array"
    UNKNOWN = "unknown"


class ApiKind(str, Enum):
    """What a CUDA/HIP runtime or driver call does, for launch/sync/copy analysis."""

    LAUNCH = "launch"
    GRAPH_LAUNCH = "graph_launch"
    SYNC = "sync"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    ALLOC = "alloc"
    FREE = "free"
    EVENT = "event"
    STREAM = "stream"
    OTHER = "other"


class ApiDomain(str, Enum):
    RUNTIME = "runtime"
    DRIVER = "driver"


class SyncKind(str, Enum):
    """GPU-side synchronization records (CUPTI SYNCHRONIZATION / Kineto ``cuda_sync``)."""

    STREAM = "stream"
    EVENT = "event"
    CONTEXT = "context"
    STREAM_WAIT_EVENT = "stream_wait_event"
    UNKNOWN = "unknown"


class AnnotationSource(str, Enum):
    """Where a range annotation came from."""

    USER = "user"  # torch record_function, TF TraceMe, JAX named scopes on the host
    GPU_USER = "gpu_user"  # host annotation projected onto a GPU stream by Kineto
    NVTX = "nvtx"
    PROFILER_STEP = "profiler_step"
    OS_RUNTIME = "os_runtime"  # an OS runtime library call (Nsight Systems' OSRT_API trace)


class CpuOpKind(str, Enum):
    FRAMEWORK = "framework"  # aten::*, TF ops ...
    PYTHON = "python"  # python_function events (with_stack)


class StepSource(str, Enum):
    """How step boundaries were found (see ``analysis.steps``)."""

    PROFILER_STEP = "profiler_step"
    ANNOTATION = "annotation"
    NVTX = "nvtx"
    HOOK = "hook"
    MANUAL = "manual"
    PERIODICITY = "periodicity"
    WHOLE_TRACE = "whole_trace"


class InputWaitSource(str, Enum):
    DATALOADER = "dataloader"  # torch DataLoader __next__ / enumerate(DataLoader)
    TF_DATA = "tf_data"
    CAPTURE_HOOK = "capture_hook"


class CollectiveOp(str, Enum):
    """What a collective does (``collectives.op``); the nccl-tests bus-bandwidth factor of each
    is in ``model.collectives``."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND = "send"
    RECV = "recv"
    SEND_RECV = "send_recv"  # a grouped send/recv pair (NCCL SendRecv kernels)
    BARRIER = "barrier"
    OTHER = "other"


class CollectiveSource(str, Enum):
    """Where a ``collectives`` row's arguments came from."""

    KERNEL_ARGS = "kernel_args"  # Kineto kernel event args (torch >= 2.4)
    PARAM_COMMS = "param_comms"  # Kineto ``record_param_comms`` op args, linked by External id
    FLIGHT_RECORDER = "flight_recorder"  # torch.distributed's NCCL flight recorder (record)
    KERNEL_NAME = "kernel_name"  # the NCCL/RCCL kernel name only: no sizes, no group


class DeviceType(str, Enum):
    CPU = "cpu"
    GPU = "gpu"


class SourceKind(str, Enum):
    """What produced a rank's tables (``store.produce.RankBundle.kind``)."""

    KINETO = "kineto"  # a PyTorch profiler (Kineto) trace, imported
    CUPTI = "cupti"  # `stepscope record`, the CUPTI backends (ctypes or cupti-python)
    TORCH = "torch"  # `stepscope record --backend torch`: torch.profiler in the process
    HOST = "host"  # `stepscope record` with no GPU backend running: host-side tables only
    XSPACE = "xspace"  # a TensorFlow/JAX profiler XSpace (*.xplane.pb), imported
    NSYS = "nsys"  # an Nsight Systems export (SQLite or Parquet folder), imported
    NCU = "ncu"  # Nsight Compute kernel profiles (raw-page CSV or .ncu-rep), imported


ENUMS: tuple[type[Enum], ...] = (
    CopyKind, MemoryKind, ApiKind, ApiDomain, SyncKind, AnnotationSource, CpuOpKind, StepSource,
    InputWaitSource, CollectiveOp, CollectiveSource, DeviceType, SourceKind,
)
