"""The torch.profiler hand-off: ``on_trace_ready(dir)`` wherever
``torch.profiler.tensorboard_trace_handler(dir)`` goes (it writes the same Kineto trace per
profiler cycle, then a stepscope run beside it, and prints the top findings), and
``profile(...)``, ``torch.profiler.profile`` with stepscope's defaults. torch is imported when
one of them is called, never by ``import stepscope``."""

from stepscope.torch.handoff import TraceReady, on_trace_ready
from stepscope.torch.profiling import DEFAULT_SCHEDULE, profile

__all__ = ["DEFAULT_SCHEDULE", "TraceReady", "on_trace_ready", "profile"]
