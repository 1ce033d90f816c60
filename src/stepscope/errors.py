"""One exception tree. Every message is one line that says what went wrong and where."""

from __future__ import annotations


class StepscopeError(Exception):
    """Base of every error stepscope reports to the user (exit code 2 at the CLI)."""


class TraceFormatError(StepscopeError):
    """An input trace cannot be read: names the file and the problem."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class RunError(StepscopeError):
    """A run folder is missing, incomplete or from an incompatible version."""


class QueryError(StepscopeError):
    """A SQL query over a run failed."""


class CaptureError(StepscopeError):
    """Live capture could not start or finish."""


class DamagedFileError(TraceFormatError):
    """A file of the right kind that cannot be read to its end: truncated, corrupt, invalid JSON.
    Unlike a file that is simply not a trace, it is never skipped when it is in a folder."""


class MissingExtensionWarning(UserWarning):
    """An optional compiled part is not installed, so stepscope runs a slower path (or must
    compile it at first use). Issued once per process and place (Python's default warning
    filter); the CLI prints it as one ``stepscope: note:`` line."""


# Characters that must not reach a terminal raw: C0 controls but tab and newline, DEL, C1 controls,
# and the bidirectional overrides (they reorder what is shown).
_UNSAFE = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}
_UNSAFE.update({c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]})


def printable(text: str, newlines: bool = True) -> str:
    """``text`` with control characters (escape sequences, bells, bidirectional overrides)
    written as ``\\xNN`` escapes, so that names from a trace cannot drive a terminal;
    ``newlines=False`` escapes newlines and tabs too (one-line messages)."""
    table = _UNSAFE if newlines else {**_UNSAFE, 0x09: "\\t", 0x0A: "\\n"}
    return text.translate(table)


def foreign(exc: BaseException) -> str | None:
    """One line for an exception from outside stepscope that bad input or a full disk can
    raise (``OSError``, ``RecursionError``, ``OverflowError``, ``UnicodeError``, ``MemoryError``),
    naming the file when the exception does; None for any other exception (a bug)."""
    if isinstance(exc, OSError):
        lines = str(exc).strip().splitlines()
        what = exc.strerror or (lines[0] if lines else type(exc).__name__)
        return f"{exc.filename}: {what}" if exc.filename is not None else what
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to be read"
    if isinstance(exc, OverflowError):
        return f"a number in the input is out of range ({exc})"
    if isinstance(exc, UnicodeError):
        return f"the input is not valid UTF-8 ({exc})"
    if isinstance(exc, MemoryError):
        return "out of memory"
    return None
