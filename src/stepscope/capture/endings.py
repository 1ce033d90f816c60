"""How a recorded program ended, and whether that cut its capture short.

Two different things, said apart (issue 17):

- the program's *exit status*: ``exit status N`` or a signal. A program that ends with
  ``sys.exit(3)`` after its window closed has a complete capture: the run says "the program
  exited with status 3" (``program_exit_status``) or "was killed by SIGKILL"
  (``program_killed``), and is not partial;
- a *partial* run (``Manifest.partial``, diagnostic ``partial_run``): some rank's capture really
  was cut. Either its process never finished its capture (killed mid-window or before its window
  opened, ``os._exit``: its meta has no ``window_end_ns``, and what it had not flushed yet is
  missing), or it crashed (an uncaught exception, a signal such as SIGTERM) while its window was
  still open or before it opened (``window_ended_with_program``).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from stepscope.store.manifest import Diagnostic

CRASHES = ("exception", "signal")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended_by(returncode: int) -> str:
    """``PartitionMeta.ended`` for a Popen return code (negative: ended by that signal)."""
    if returncode == 0:
        return "exit"
    if returncode > 0:
        return f"exit status {returncode}"
    try:
        return f"signal: {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal: {-returncode}"


def status_text(returncode: int | None) -> str:
    """What the program's status says, in words ("" for a clean exit)."""
    if returncode is None:
        return "the program did not finish"
    if returncode > 0:
        return f"the program exited with status {returncode}"
    if returncode < 0:
        return f"the program was killed by {signal_name(-returncode)}"
    return ""


def status_diagnostic(returncode: int | None) -> Diagnostic | None:
    """The run-level diagnostic for the program's status (None: it exited cleanly)."""
    text = status_text(returncode)
    if not text:
        return None
    code = ("program_not_finished" if returncode is None else "program_killed"
            if returncode < 0 else "program_exit_status")
    return Diagnostic("warning", code, text)


def capture_cut(settings: Mapping[str, Any], ended: str) -> str | None:
    """Why a process's capture was cut short, or None when it was not (see the module doc).
    ``settings``: its partition's settings; ``ended``: how it ended (settled by the launcher)."""
    how = ("its process ended" if ended in ("running", "unknown")
           else f"its process ended by {ended}")
    if not isinstance(settings.get("window_end_ns"), int):
        if not isinstance(settings.get("window_start_ns"), int):
            return f"{how} before its capture window opened"
        return f"{how} with its capture window open: what it had not flushed yet is missing"
    if settings.get("window_ended_with_program") and ended.startswith(CRASHES):
        return f"{how} before its capture window closed"
    return None


__all__ = ["capture_cut", "ended_by", "signal_name", "status_diagnostic",
           "status_text"]
