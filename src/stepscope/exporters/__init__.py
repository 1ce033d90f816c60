"""Exporters: a run written out in another tool's format (today the Chrome trace-event
JSON that Perfetto UI and chrome://tracing open, :mod:`stepscope.exporters.trace`)."""
