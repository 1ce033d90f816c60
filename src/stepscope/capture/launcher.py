"""Run the user's command with the capture bootstrap injected; forward signals; keep the exit code.

Injection needs no code change: ``capture/sitecustomize_dir`` is prepended to ``PYTHONPATH`` and
the ``CaptureConfig`` travels as JSON in ``STEPSCOPE_CAPTURE``. Every Python interpreter the
command starts (``torchrun`` workers, ``subprocess`` children) inherits both and captures itself
into its own staging partition.

The child inherits stdin, stdout and stderr as they are (its output is byte-identical; ``record
--live`` on a terminal hands it pseudo-terminals for stdout/stderr instead: ``cli.live``). It runs
in its own process group, so SIGINT/SIGTERM that the launcher receives are forwarded to the whole
group (``torchrun`` and its workers) and not delivered twice. When the launcher owns the terminal's
foreground, the child's group is made the foreground group for the run (as a shell does), so that
Ctrl-C and terminal reads go to the program, and the launcher takes the terminal back afterwards.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from stepscope.capture.bootstrap import ENV_VAR, CaptureConfig
from stepscope.errors import CaptureError

SITE_DIR = Path(__file__).resolve().parent / "sitecustomize_dir"
PKG_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding `stepscope/`
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class LaunchResult:
    returncode: int  # Popen semantics: negative = ended by that signal
    wall_s: float
    forwarded: tuple[str, ...] = ()  # signals the launcher forwarded
    pid: int | None = None  # the command's process: ``merge`` gives its partition ``returncode``


def build_command(argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """``train.py ARGS`` and ``-m mod ARGS`` run under this interpreter; anything else as given."""
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise CaptureError("no command to record: stepscope record -- python train.py")
    first = args[0]
    if first == "-m":
        if len(args) < 2:
            raise CaptureError("-m needs a module name: stepscope record -- -m package.train")
        return [python, *args]
    if first.endswith((".py", ".pyw")):
        return [python, *args]
    return args


def child_env(config: CaptureConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + old if old else "")
    env[ENV_VAR] = config.to_json()
    if config.gpu in ("auto", "cupti") and "NVTX_INJECTION64_PATH" not in env:
        # NVTX ranges reach CUPTI only when NVTX loads it as its injection library, which it
        # decides at the first NVTX call of the process: set before the program starts
        from stepscope.capture.cupti.native import find_libcupti

        lib = find_libcupti(env)
        if lib:
            env["NVTX_INJECTION64_PATH"] = lib
    return env


def _foreground_tty() -> int | None:
    """The terminal fd when this process is in the terminal's foreground group, else None."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _give_terminal(fd: int, pgrp: int) -> None:
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background tcsetpgrp would stop us
    try:
        os.tcsetpgrp(fd, pgrp)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


def launch(cmd: Sequence[str], env: Mapping[str, str], *, stdout: int | None = None,
           stderr: int | None = None, started: Callable[[], None] | None = None) -> LaunchResult:
    """Run ``cmd`` to the end; returns its status. Raises CaptureError if it cannot start.
    ``stdout``/``stderr``: file descriptors to give the program instead of this process's
    (``record --live``'s pseudo-terminals); ``started``: called once the program runs (threads
    that watch it are started there, after the fork)."""
    forwarded: list[str] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.append(signal.Signals(signum).name)
        if child is not None:
            try:
                os.killpg(child.pid, signum)
            except (ProcessLookupError, PermissionError):
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass

    tty = _foreground_tty()
    on_main = _on_main_thread()
    previous = {s: signal.getsignal(s) for s in FORWARDED} if on_main else {}
    if on_main:
        for s in FORWARDED:
            signal.signal(s, forward)
    t0 = time.perf_counter()
    try:
        try:
            # preexec_fn rather than process_group= (3.11+); the launcher runs no threads here
            parent = os.getpid()
            child = subprocess.Popen(list(cmd), env=dict(env), stdout=stdout, stderr=stderr,
                                     preexec_fn=lambda: _in_child(parent))
        except FileNotFoundError:
            raise CaptureError(f"{cmd[0]}: command not found") from None
        except PermissionError:
            raise CaptureError(f"{cmd[0]}: permission denied") from None
        except OSError as exc:
            raise CaptureError(f"{cmd[0]}: cannot start ({exc.strerror})") from None
        if tty is not None:
            _give_terminal(tty, child.pid)
        if started is not None:
            started()
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover (PEP 475 retries)
                continue
    finally:
        if tty is not None:
            _give_terminal(tty, os.getpgrp())
        for s, h in previous.items():
            signal.signal(s, h)
    return LaunchResult(returncode=code, wall_s=time.perf_counter() - t0, forwarded=tuple(forwarded),
                        pid=child.pid)


def _in_child(parent: int) -> None:
    """In the forked child, before the program starts: its own process group and, on Linux,
    SIGTERM when the launcher dies (``prctl(PR_SET_PDEATHSIG)``): a ``stepscope record`` killed
    with SIGKILL, which cannot forward anything, must not leave the program running on."""
    os.setpgrp()
    if _PRCTL is None:
        return
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def _libc_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # looked up before any fork (the child only calls it)


def _on_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def shell_status(returncode: int) -> int:
    """The status a shell reports: the exit code, or 128 + signal number."""
    return returncode if returncode >= 0 else 128 - returncode


__all__ = ["LaunchResult", "PKG_ROOT", "SITE_DIR", "build_command", "child_env", "launch",
           "shell_status"]
