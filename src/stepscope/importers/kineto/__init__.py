"""PyTorch profiler (Kineto) Chrome traces, one file per rank: ``parse.parse_kineto`` reads one
as a rank bundle. ``reader`` decodes (``events``/``fast`` Structs, or the compiled scanner:
``native``, ``scanned``), ``build``/``tables``/``columns`` make the tables."""

from stepscope.importers.kineto.parse import parse_kineto

__all__ = ["parse_kineto"]
