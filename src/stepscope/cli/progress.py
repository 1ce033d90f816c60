"""Progress of long work as a ``rich`` bar on stderr: on a terminal only, never with ``--quiet``.

One bar for every verb: ``record``'s merge, ``import`` and ``report``. Transient (gone once the
work is done) and, with ``delay_s``, drawn only once the work has run that long, so that quick
commands print nothing more than before.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from stepscope.progress import Sink

PROGRESS_AFTER_S = 2.0  # import and report: a bar only for work that takes longer than this


class TerminalProgress:
    """``with TerminalProgress(show, delay_s) as sink``: ``sink(what, done, total)`` moves a task
    of the bar; ``sink`` is None when nothing is to be drawn (``show`` false: ``--quiet``;
    stderr not a terminal). With ``delay_s``, the bar starts at the first update after that
    many seconds (earlier updates are remembered, not drawn)."""

    def __init__(self, show: bool, delay_s: float = 0.0) -> None:
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        self._seen: dict[str, tuple[float, float]] = {}
        self._delay_s = delay_s
        self._since = 0.0
        self._started = False
        if show and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

            self._bar = Progress(TextColumn("stepscope: {task.description}"), BarColumn(),
                                 TaskProgressColumn(), console=Console(stderr=True),
                                 transient=True)

    def __enter__(self) -> Sink | None:
        if self._bar is None:
            return None
        self._since = time.monotonic()
        if self._delay_s <= 0:
            self._start()
        return self.update

    def _start(self) -> None:
        self._bar.start()
        self._started = True
        for what, (done, total) in self._seen.items():  # what was done before the bar showed
            self._tasks[what] = self._bar.add_task(what, total=max(total, 1.0), completed=done)
        self._seen.clear()

    def update(self, what: str, done: float, total: float) -> None:
        if not self._started:
            if time.monotonic() - self._since < self._delay_s:
                self._seen[what] = (done, total)
                return
            self._start()
        task = self._tasks.get(what)
        if task is None:
            task = self._tasks[what] = self._bar.add_task(what, total=max(total, 1.0))
        self._bar.update(task, completed=done, total=max(total, 1.0))

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._bar.stop()
