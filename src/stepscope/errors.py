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
