"""Process integration of a capture session: the active sessions (``stepscope.step()`` finds the
capture the injected bootstrap started in this process), exit/exception/SIGTERM hooks, and the
entry point of the injected ``sitecustomize``.

Process-global state: the active sessions list (``_ACTIVE``) is the one module-level mutable
value. It is inherent: ``stepscope.step()`` must find the capture that the injected bootstrap
started in this process, without the user passing anything around.
"""

from __future__ import annotations

import atexit
import builtins
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


TERM_FLUSH_S = 20.0  # the longest a SIGTERM waits for the capture's flush before it ends the program


def install_process_hooks(session: Session) -> None:
    """atexit, sys.excepthook (chained), SIGTERM (flush, then die by the signal as before; the
    flush is given ``TERM_FLUSH_S``, and a second SIGTERM ends the program at once), and
    the exit calls (``_wrap_exits``: a non-zero status is noted, so that a rank that exits 3 is
    not recorded as a clean exit)."""
    interrupted: list[bool] = []
    atexit.register(_die_by_sigint, interrupted)  # registered first, so it runs last
    atexit.register(session.finish)
    previous = sys.excepthook
    _wrap_exits(session)

    def excepthook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        if issubclass(et, KeyboardInterrupt) and threading.current_thread() is \
                threading.main_thread():
            interrupted.append(True)
        try:
            session.finish(f"exception: {et.__name__}")
        finally:
            previous(et, ev, tb)

    sys.excepthook = excepthook

    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                def on_term(signum: int, frame: FrameType | None) -> None:
                    # the signal's own action from here on: a second SIGTERM, or the
                    # watchdog's, ends the program while the flush is still under way
                    signal.signal(signum, signal.SIG_DFL)
                    watchdog = threading.Timer(TERM_FLUSH_S, os.kill, (os.getpid(), signum))
                    watchdog.daemon = True
                    watchdog.start()
                    try:
                        session.finish(f"signal: {signal.Signals(signum).name}")
                    finally:
                        watchdog.cancel()
                        os.kill(os.getpid(), signum)

                signal.signal(signal.SIGTERM, on_term)
        except (ValueError, OSError):
            pass


def _die_by_sigint(interrupted: list[bool]) -> None:
    """After an uncaught KeyboardInterrupt (Ctrl-C), end the process by SIGINT, as Python itself
    does, so that a shell sees 130. Python does it only when no code ran through ``PyRun_*``
    after the interrupt, and ``session.finish`` in the excepthook imports modules that do
    (pyarrow): the program then exited with status 1 (issue 19)."""
    if not interrupted:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    except (ValueError, OSError):
        return
    os.kill(os.getpid(), signal.SIGINT)


def _wrap_exits(session: Session) -> None:
    """Note the status of ``sys.exit(N)`` and of the site builtins ``exit(N)``/``quit(N)``
    called on the main thread (where ending the program is what they do) as
    ``session.exit_status``.

    Limits: the exit status of a process is not visible from inside it. ``raise SystemExit(N)``
    calls nothing that can be wrapped, ``atexit`` handlers and ``threading``/``sys`` hooks do not
    receive it, and catching it at the top level would mean running the program's ``__main__``
    ourselves. So a bare ``raise SystemExit(N)`` (or ``os._exit(N)``) is seen only by the parent:
    ``stepscope record`` gives its own child's partition the status it waited for
    (``partitions.settle_launched``); ranks started by another launcher (``torchrun`` workers)
    keep ``exit``. A ``sys.exit(N)`` that the program catches is noted all the same (again, the
    launcher's status corrects it for its own child)."""

    def note(status: Any) -> None:
        if status not in (None, 0) and threading.current_thread() is threading.main_thread():
            session.exit_status = status if isinstance(status, int) else 1

    original_exit = sys.exit

    @functools.wraps(original_exit)
    def exit(status: Any = None, /) -> NoReturn:  # noqa: A001 - sys.exit's own name
        note(status)
        original_exit(status)

    sys.exit = exit
    quitter = type(getattr(builtins, "exit", None))  # site's Quitter: raises SystemExit itself
    original_call = quitter.__dict__.get("__call__") if quitter.__module__ == "_sitebuiltins" else None
    if original_call is not None:

        @functools.wraps(original_call)
        def __call__(self: Any, code: Any = None) -> Any:
            note(code)
            return original_call(self, code)

        quitter.__call__ = __call__  # type: ignore[method-assign]


def start_from_env(text: str, argv: tuple[str, ...] = ()) -> Session | None:
    """Entry point of the injected ``sitecustomize``."""
    if "--multiprocessing-fork" in argv:
        return None  # a spawned multiprocessing worker: its parent is the one captured
    config = CaptureConfig.from_json(text)
    session = Session(config, argv=argv)
    push(session)
    install_process_hooks(session)
    return session.begin()
