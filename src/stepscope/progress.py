"""Where long work says how far it is: ``report(what, done, total)``, heard by whoever set a
sink with ``reporting(sink)`` (the CLI's terminal bar, ``cli/progress.py``); a no-op otherwise.

A context variable rather than a parameter threaded through every layer: the importers, the
store and the analysis report a few times per run (per chunk, per phase), and library callers
who set nothing pay one lookup per report. Standard library only (``stepscope import``'s
start-up must not pull in ``rich``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# (what, done, total): e.g. ("reading gpt.pt.trace.json", 120e6, 225e6) in bytes
Sink = Callable[[str, float, float], None]

_SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("stepscope_progress",
                                                                    default=None)


def report(what: str, done: float, total: float) -> None:
    """Tell the current sink, if any, that ``done`` of ``total`` of ``what`` is done."""
    sink = _SINK.get()
    if sink is not None:
        sink(what, done, total)


@contextmanager
def reporting(sink: Sink | None) -> Iterator[None]:
    """Send ``report``'s calls made inside the block to ``sink`` (None: nowhere)."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
