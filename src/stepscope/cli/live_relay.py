"""``record --live`` on a terminal: the program's output, read from its pseudo-terminals and
printed above the panel (``cli.live``).

One thread serves the program's stdout and stderr together. It sleeps in ``select`` until the
program writes (no timer while nothing is pending: a quiet program wakes it never), reads at
once (the program never waits on a full pty while this process is busy elsewhere), and prints
whole lines at most every :data:`RELAY_EVERY_S` per stream (each print above the panel redraws
it: a program printing a line per step must not make the recorder redraw per line). A line the
program redraws in place (a ``\\r`` progress bar) shows when it ends with a newline. It ends
when every writer has closed the ptys (the program and its children ended) or at :meth:`stop`,
printing what is left either way.
"""

from __future__ import annotations

import codecs
import os
import select
import time
from collections.abc import Callable

RELAY_EVERY_S = 0.1  # the program's output is printed above the panel this often, at most
BIG = 1 << 16  # pending output past this is printed at once


class Relay:
    """``add(master)`` for each pty before :meth:`run` (on its thread); :meth:`stop` from
    another thread ends it; :meth:`close` closes the ptys and the wake-up pipe."""

    def __init__(self, print_above: Callable[[str], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._print = print_above
        self._clock = clock
        self.fds: list[int] = []
        self._wake: tuple[int, int] | None = None  # (read end, write end), with the first pty
        self._closed = False

    def add(self, master: int) -> None:
        if self._wake is None:
            self._wake = os.pipe()
        self.fds.append(master)

    def run(self) -> None:
        if self._wake is None:
            return
        wake = self._wake[0]
        decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in self.fds}
        pending = dict.fromkeys(self.fds, "")
        printed = dict.fromkeys(self.fds, 0.0)
        open_fds = list(self.fds)
        stopping = False
        while open_fds and not stopping:
            now = self._clock()
            due = [printed[fd] + RELAY_EVERY_S - now for fd in open_fds if "\n" in pending[fd]]
            timeout = max(min(due), 0.0) if due else None  # nothing pending: sleep until data
            ready, _, _ = select.select([*open_fds, wake], [], [], timeout)
            if wake in ready:
                stopping = True
                ready = _readable(open_fds)  # what is there now, then the end
            for fd in ready:
                if fd == wake:
                    continue
                data = _read(fd)
                if not data:
                    open_fds.remove(fd)
                    pending[fd] += decoders[fd].decode(b"", final=True)
                    continue
                pending[fd] += decoders[fd].decode(data)
            now = self._clock()
            for fd in self.fds:
                text = pending[fd]
                if "\n" in text and (now - printed[fd] >= RELAY_EVERY_S or len(text) > BIG
                                     or fd not in open_fds or stopping):
                    done, _, pending[fd] = text.rpartition("\n")
                    self._print(done)
                    printed[fd] = now
        for fd in self.fds:  # the rest: the last line without a newline, or the last of all
            rest = pending[fd] + (decoders[fd].decode(b"", final=True) if fd in open_fds else "")
            if rest:
                self._print(rest.removesuffix("\n"))

    def stop(self) -> None:
        if not self._closed and self._wake is not None:
            try:
                os.write(self._wake[1], b"x")
            except OSError:
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (*self.fds, *(self._wake or ())):
            try:
                os.close(fd)
            except OSError:
                pass


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: every writer closed it
        return b""


def _readable(fds: list[int]) -> list[int]:
    try:
        ready, _, _ = select.select(fds, [], [], 0)
    except (OSError, ValueError):
        return []
    return ready


__all__ = ["BIG", "RELAY_EVERY_S", "Relay"]
