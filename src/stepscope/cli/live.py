"""``stepscope record --live``: the job's figures while it runs, from ``capture.live_feed``.

On a terminal (stderr a TTY): a ``rich`` Live panel on stderr, redrawn every second (step time,
GPU busy, input wait per process, the top provisional finding). The program's stdout and stderr
that were the terminal are handed pseudo-terminals instead (the program still sees a terminal:
line buffering, colours), whose output the recorder prints above the panel, a line at a time, so
that the panel never overwrites it (``cli.live_relay``).

Without a terminal: one line on stderr every :data:`LINE_EVERY_S` seconds, when new figures came
(a CI log gets a heartbeat, not a redraw); the program's output is left as it is.

The feed is read in this (the recorder's) process: the profiled program does nothing more (its
capture configuration is the same with or without ``--live``). The recorder's share is kept small
and out of the program's way: the chunks are read once a second on a thread of lowered priority,
outside ``rich``'s lock, and the relay sleeps while the program is quiet.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from stepscope.capture.live_feed import RECENT_S, RECENT_STEPS, LiveFeed, LiveSnapshot, hint
from stepscope.cli.live_relay import Relay

LINE_EVERY_S = 30.0  # without a terminal: a line this often (when there is something new)
REFRESH_S = 1.0  # the panel's redraw
BACKGROUND_NICE = 10  # the live view's threads run this much nicer than the recorder


def render(snap: LiveSnapshot, elapsed_s: float, flush_every_s: float = 5.0) -> Any:
    """The panel (a ``rich`` renderable) for one snapshot. Only numbers and fixed words: no
    name from the program reaches it, and the text is built as ``Text``, never as markup."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    head = Text(f"{_clock(elapsed_s)} elapsed · {snap.chunks} chunks read "
                f"(the capture writes every {flush_every_s:g} s)", style="dim")
    parts: list[Any] = [head]
    if snap.empty:
        parts.append(Text("waiting for the capture's first flush (it writes once its window "
                          "is open: after the warm-up, or at --steps/--delay)"))
    if snap.processes:
        t = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("rank", "pid", "step", f"step time (median of {RECENT_STEPS})",
                    "input wait"):
            t.add_column(col, justify="left" if col in ("rank", "pid") else "right")
        for p in snap.processes[:8]:
            t.add_row("-" if p.rank is None else str(p.rank), str(p.pid),
                      "-" if p.last_step is None else str(p.last_step), _ms(p.step_ms),
                      _pct(p.input_wait_share))
        parts.append(t)
        if len(snap.processes) > 8:
            parts.append(Text(f"... and {len(snap.processes) - 8} more processes", style="dim"))
    if snap.gpu_busy:
        busy = "  ".join(f"gpu{d} {b:.0f}%" for d, b in snap.gpu_busy[:16])
        parts.append(Text(f"GPU busy (NVML, last {RECENT_S:g} s): {busy}"))
    top = hint(snap)
    if top is not None:
        parts.append(Text(f"top so far: {top.topic}: {top.text}", style="bold"))
    elif snap.processes:
        parts.append(Text("top so far: nothing stands out yet"))
    return Panel(Group(*parts), title="stepscope record --live", title_align="left")


def line(snap: LiveSnapshot, elapsed_s: float) -> str:
    """The one-line form (no terminal): the first process's figures, GPU busy, the top hint."""
    said = [f"stepscope: live {_clock(elapsed_s)}"]
    if snap.processes:
        p = snap.processes[0]
        who = f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}"
        more = f" (+{len(snap.processes) - 1} processes)" if len(snap.processes) > 1 else ""
        said.append(f"{who}{more} step {p.last_step}: {_ms(p.step_ms)}/step, input wait "
                    f"{_pct(p.input_wait_share)}")
    if snap.gpu_busy:
        said.append("GPU busy " + " ".join(f"gpu{d} {b:.0f}%" for d, b in snap.gpu_busy[:8]))
    top = hint(snap)
    if top is not None:
        said.append(f"top: {top.topic}")
    return "; ".join(said)


def _clock(s: float) -> str:
    s = max(int(s), 0)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


class LiveView:
    """``with LiveView(staging, terminal=...) as view``: :meth:`child_stdio` before the program
    starts (the fds to give it), :meth:`started` once it runs; leaving the block stops the panel
    and prints what the program wrote last. ``clock`` and ``stream`` are for tests.

    Threads (started only in :meth:`started`, after the fork): on a terminal, one that polls the
    feed and redraws the panel every :data:`REFRESH_S` (:meth:`refresh`; ``rich``'s own refresh
    thread is not used: it would read the feed under ``rich``'s lock, which the relay's prints
    wait for) at a lower scheduling priority (:func:`background`), and one relay for the
    program's stdout and stderr together (``live_relay``), which sleeps until the program writes;
    without a terminal, one that writes a line every ``line_every_s`` (also lowered)."""

    def __init__(self, staging: Path, *, terminal: bool, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 line_every_s: float | None = None, flush_every_s: float = 5.0) -> None:
        self.feed = LiveFeed(staging)
        self.terminal = terminal
        self._stream = stream or sys.stderr
        self._clock = clock
        self._t0 = clock()
        self._every = LINE_EVERY_S if line_every_s is None else line_every_s
        self._flush_every = flush_every_s
        self._live: Any = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._relay = Relay(self._print_above)
        self._slaves: list[int] = []
        self._last_chunks = -1
        self.snapshot = LiveSnapshot()  # the feed's figures as last polled

    def __enter__(self) -> LiveView:
        return self

    def child_stdio(self) -> tuple[int | None, int | None]:
        """On a terminal: pseudo-terminals for the program's stdout and stderr where those are
        the terminal (None: inherit as it is)."""
        if not self.terminal:
            return None, None
        out: list[int | None] = []
        for stream in (sys.stdout, sys.stderr):
            fd = _tty_fd(stream)
            if fd is None:
                out.append(None)
                continue
            master, slave = _open_pty(fd)
            self._relay.add(master)
            self._slaves.append(slave)
            out.append(slave)
        return out[0], out[1]

    def started(self) -> None:
        """The program runs: close this side's copies of its pty ends, start the relay and the
        panel (threads started only now: the launcher forks with no thread running)."""
        for fd in self._slaves:
            os.close(fd)
        self._slaves.clear()
        self._t0 = self._clock()
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self._stream, stderr=self._stream is sys.stderr)
            self._live = Live(self.panel(), console=console, auto_refresh=False,
                              transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.start(refresh=True)
            self._spawn(self._refresh_loop)
            if self._relay.fds:
                self._spawn(self._relay.run)
        else:
            self._spawn(self._lines)

    def _spawn(self, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name="stepscope-live", daemon=True)
        t.start()
        self._threads.append(t)

    def _refresh_loop(self) -> None:
        background()
        while not self._stop.wait(REFRESH_S):
            self.refresh()

    def refresh(self) -> None:
        """Once a second: read the chunks that came (outside ``rich``'s lock), then redraw."""
        self.poll()
        self.redraw()

    def poll(self) -> LiveSnapshot:
        try:
            self.snapshot = self.feed.poll()
        except Exception:  # the panel must never end the recording
            pass
        return self.snapshot

    def panel(self) -> Any:
        return render(self.snapshot, self._clock() - self._t0, self._flush_every)

    def redraw(self) -> None:
        live = self._live
        if live is not None:
            live.update(self.panel(), refresh=True)

    def _lines(self) -> None:
        background()
        while not self._stop.wait(self._every):
            self.tick()

    def tick(self) -> str | None:
        """Without a terminal: one line when there is something new since the last one."""
        snap = self.feed.poll()
        if snap.chunks == self._last_chunks or snap.empty:
            return None
        self._last_chunks = snap.chunks
        text = line(snap, self._clock() - self._t0)
        print(text, file=self._stream, flush=True)
        return text

    def _print_above(self, text: str) -> None:
        from rich.text import Text

        live = self._live
        if live is None:
            return
        live.console.print(Text.from_ansi(text), highlight=False, markup=False, soft_wrap=True)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._relay.stop()  # it prints what is left and ends
        for t in self._threads:
            t.join(timeout=2.0)  # a relay whose pty a leftover child holds is left to end
        for fd in self._slaves:
            os.close(fd)
        if self._live is not None:
            self._live.stop()
        self._relay.close()


def background() -> None:
    """Lower the calling thread's scheduling priority (Linux: a thread's own nice value; the
    recorder's other threads and the program are not affected): the panel's work then yields
    to the program whenever they would share a core."""
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(now + BACKGROUND_NICE, 19))
    except (OSError, AttributeError):
        pass


def _tty_fd(stream: TextIO) -> int | None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return None
    return fd if os.isatty(fd) else None


def _open_pty(like: int) -> tuple[int, int]:
    """A pty with ``like``'s window size and no output processing (the bytes pass as written)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        size = fcntl.ioctl(like, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except OSError:
        pass
    return master, slave


__all__ = ["LINE_EVERY_S", "LiveView", "background", "line", "render"]
