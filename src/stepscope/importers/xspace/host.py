"""The host plane (``/host:CPU``) -> threads, CUDA/HIP API calls, Python functions, framework
ops, TraceMe ranges, step markers and ``tf.data`` waits.

Each line is a host thread (``python3``, ``Host Threads/<tid>``, ``tf_Compute/<tid>``,
``py_xla_execute/<tid>`` ...). An event is:

* an API call when it carries ``correlation_id`` (the CUPTI/ROCTracer callback of
  ``cuLaunchKernel``, ``hipMemcpyDtoDAsync`` ...; XLA names a kernel launch after its kernel,
  which ``parse`` renames once the device records are known), or when it is named as one
  (``cuLaunchHostFunc``: XLA's own TraceMe around the call);
* a host wait for the device (an API call of kind ``sync``) when it is JAX's
  ``block_until_ready`` (the Python tracer's ``$api.py:N block_until_ready`` /
  ``$array.py:N block_until_ready``) or PJRT's ``BlockHostUntilReady``: the host stopped until
  the GPU finished, as ``cudaStreamSynchronize`` would (the outermost of nested ones counts);
* a Python function when its name starts with ``$`` (``jax.profiler``'s Python tracer:
  ``$file.py:12 function``);
* a step when it carries ``step_num`` (``jax.profiler.StepTraceAnnotation``,
  ``tf.profiler.experimental.Trace(..., step_num=N, _r=1)``), also kept as an annotation;
* a ``tf.data`` wait when it is ``IteratorGetNext*`` (the op the training step blocks in while
  the input pipeline has no batch ready: TF Profiler's input time);
* a framework op when it is a TensorFlow op (an ``is_eager`` stat) or a JAX jitted call
  (``PjitFunction(...)``);
* otherwise a ``TraceMe`` range (annotation). Instants (zero duration) and the allocator's
  ``MemoryAllocation``/``MemoryDeallocation`` markers are left out.
"""

from __future__ import annotations

import re
from typing import Any

from stepscope.importers.xspace.device import ns
from stepscope.importers.xspace.events import Collected, PlaneView, XEvent, int_or_none
from stepscope.schema_enums import AnnotationSource, ApiKind, CpuOpKind, InputWaitSource

_SKIP = ("MemoryAllocation", "MemoryDeallocation")
_API_PREFIXES = ("cuda", "cu", "hip", "nccl", "rccl")
# the host waiting for the device: JAX's block_until_ready (Python tracer), PJRT's TraceMe
_HOST_WAIT = re.compile(r"^\$\S*(?:api|array)\.py:\d+ block_until_ready$|BlockHostUntilReady$")
JAX_BLOCK = "jax.block_until_ready"  # the api_calls name of such a wait
_JAX_CALL = ("PjitFunction(", "PmapFunction(")
INPUT_WAIT = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute",
              "IteratorGetNext")


class HostPlane:
    """Maps one host plane into ``out``; remembers step markers and framework hints."""

    def __init__(self, view: PlaneView, pid: int | None, out: Collected) -> None:
        self.view, self.pid, self.out = view, pid, out
        self.steps: list[tuple[int, int, int, str]] = []  # (start ns, dur ns, step, name)
        self.hints: set[str] = set()  # "jax" / "tensorflow" evidence seen
        self.events = 0

    def read(self) -> None:
        for line in self.view.lines():
            tid = int(line.id)
            lname = line.display_name or line.name
            self.out.add("threads", pid=self.pid, tid=tid, name=lname)
            if lname.startswith(("tf_Compute", "tf_data", "tf_gpu_private", "tf_inter_op")):
                self.hints.add("tensorflow")
            if lname.startswith(("py_xla_execute", "py_xla_callback")):
                self.hints.add("jax")
            for e in self.view.events(line):
                self.events += 1
                self._event(tid, e)

    def _event(self, tid: int, e: XEvent) -> None:
        out, pid = self.out, self.pid
        if e.name.startswith(_SKIP):
            return
        ts, dur = ns(e.start_ps), ns(e.dur_ps)
        if e.dur_ps > 0 and _HOST_WAIT.search(e.name):
            self.hints.add("jax")
            out.add("api_calls", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid, correlation=None,
                    name=JAX_BLOCK if e.name.startswith("$") else e.name,
                    kind=ApiKind.SYNC.value)
        if e.name.startswith("$") and e.dur_ps > 0:  # no stats to read
            out.add("cpu_ops", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid, name=e.name[1:].strip(),
                    kind=CpuOpKind.PYTHON.value)
            return
        if "correlation_id" in e.stats or (e.dur_ps > 0 and is_api_name(e.name)):
            out.add("api_calls", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid,
                    correlation=int_or_none(e.stats.get("correlation_id")), name=e.name,
                    kind=None)
            return
        if e.dur_ps <= 0:
            return
        step = int_or_none(e.stats.get("step_num"))
        if step is not None:
            self.steps.append((ts, dur, step, e.name))
        if e.name.startswith(INPUT_WAIT):
            self.hints.add("tensorflow")
            out.add("input_waits", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid,
                    source=InputWaitSource.TF_DATA.value, name=e.name)
        if "is_eager" in e.stats or e.name.startswith(_JAX_CALL):
            self.hints.add("tensorflow" if "is_eager" in e.stats else "jax")
            out.add("cpu_ops", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid, name=e.name,
                    kind=CpuOpKind.FRAMEWORK.value)
            return
        if e.name.startswith("ExecutorState::Process"):
            self.hints.add("tensorflow")
        out.add("host_annotations", ts_ns=ts, dur_ns=dur, pid=pid, tid=tid, name=e.name,
                source=AnnotationSource.USER.value, device=None, stream=None)


def is_api_name(name: str) -> bool:
    """``cuLaunchKernel``, ``cudaMemcpyAsync``, ``hipModuleLaunchKernel``, ``ncclAllReduce``
    (a vendor prefix, then an upper-case letter), not a kernel named ``cutlass_...``."""
    for prefix in _API_PREFIXES:
        if name.startswith(prefix) and name[len(prefix):len(prefix) + 1].isupper():
            return True
    return False


def framework_of(meta: dict[str, Any], hints: set[str]) -> str:
    """``jax``, ``tensorflow`` or ``unknown``: ``/host:metadata``'s ``jax_version`` first,
    then what the host threads and events showed."""
    if meta.get("jax_version") or meta.get("jaxlib_version"):
        return "jax"
    if meta.get("tf_version") or meta.get("tensorflow_version"):
        return "tensorflow"
    if "tensorflow" in hints and "jax" not in hints:
        return "tensorflow"
    if "jax" in hints:
        return "jax"
    return "unknown"


__all__ = ["INPUT_WAIT", "JAX_BLOCK", "HostPlane", "framework_of", "is_api_name"]
