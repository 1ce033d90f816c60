"""Process integration of a capture session: the active sessions (``stepscope.step()`` finds the
capture the injected bootstrap started in this process), exit/exception/SIGTERM hooks, and the
entry point of the injected ``sitecustomize``.

Process-global state: the active sessions list (``_ACTIVE``) is the one module-level mutable
value. It is inherent: ``stepscope.step()`` must find the capture that the injected bootstrap
started in this process, without the user passing anything around.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, NoReturn

from stepscope.capture.bootstrap import CaptureConfig, Session

_ACTIVE: list[Session] = []  # see the module doc: the one process-global value


def active() -> Session | None:
    return _ACTIVE[-1] if _ACTIVE else None


def push(session: Session) -> None:
    _ACTIVE.append(session)


def pop(session: Session) -> None:
    if session in _ACTIVE:
        _ACTIVE.remove(session)


def mark_step() -> None:
    """``stepscope.step()``: a step boundary for the active capture; a no-op without one."""
    s = active()
    if s is not None:
        s.step()


def install_process_hooks(session: Session) -> None:
    """atexit, sys.excepthook (chained), SIGTERM (flush, then die by the signal as before), and
    ``sys.exit`` (wrapped: a non-zero status called on the main thread is noted, so that a rank
    that exits 3 is not recorded as a clean exit; ``raise SystemExit(3)`` is not seen)."""
    atexit.register(session.finish)
    previous = sys.excepthook
    original_exit = sys.exit

    @functools.wraps(original_exit)
    def exit(status: Any = None, /) -> NoReturn:  # noqa: A001 - sys.exit's own name
        if status not in (None, 0) and threading.current_thread() is threading.main_thread():
            session.exit_status = status if isinstance(status, int) else 1
        original_exit(status)

    sys.exit = exit

    def excepthook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        try:
            session.finish(f"exception: {et.__name__}")
        finally:
            previous(et, ev, tb)

    sys.excepthook = excepthook

    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                def on_term(signum: int, frame: FrameType | None) -> None:
                    try:
                        session.finish(f"signal: {signal.Signals(signum).name}")
                    finally:
                        signal.signal(signum, signal.SIG_DFL)
                        os.kill(os.getpid(), signum)

                signal.signal(signal.SIGTERM, on_term)
        except (ValueError, OSError):
            pass


def start_from_env(text: str, argv: tuple[str, ...] = ()) -> Session | None:
    """Entry point of the injected ``sitecustomize``."""
    if "--multiprocessing-fork" in argv:
        return None  # a spawned multiprocessing worker: its parent is the one captured
    config = CaptureConfig.from_json(text)
    session = Session(config, argv=argv)
    push(session)
    install_process_hooks(session)
    return session.begin()
