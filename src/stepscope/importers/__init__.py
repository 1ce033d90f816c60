"""Foreign traces -> a stepscope run: a registry of formats (``registry.FORMATS``), one folder
each (``kineto/``, ``xspace/``), each reading a file as one rank's bundle; ``detect`` tells them apart."""

from stepscope.importers.detect import detect
from stepscope.importers.kineto import parse_kineto
from stepscope.importers.registry import FORMATS, Format, format_of
from stepscope.importers.traces import import_traces, run_folder_for, trace_files

__all__ = ["FORMATS", "Format", "detect", "format_of", "import_traces", "parse_kineto",
           "run_folder_for", "trace_files"]
