"""One process's host capture through the session (``HostSlot``): made and started, drained,
stopped (optionally leaving its step hooks in, so that the steps after the window are still
timed), its hooks taken out. A failure becomes a diagnostic: capture never breaks the program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepscope.capture.chunks import Tables
from stepscope.capture.config import CaptureConfig, HostLike
from stepscope.capture.util_pace import pace_of
from stepscope.store.manifest import Diagnostic

HostFactory = Callable[[CaptureConfig, int, Callable[[], int]], HostLike]


class HostSlot:
    """Not thread-safe: the session calls it under its lock."""

    def __init__(self, factory: HostFactory, diags: list[Diagnostic]) -> None:
        self._factory = factory
        self._diags = diags  # the session's: failures are said there
        self.host: HostLike | None = None
        self.running = False

    def _fail(self, what: str, exc: Exception) -> None:
        self._diags.append(Diagnostic("error", "host_capture_failed", f"{what}: {exc!r}"))

    def start(self, config: CaptureConfig, rank: int, clock: Callable[[], int],
              listener: Callable[[int], None]) -> None:
        try:
            host = self._factory(config, rank, clock)
            host.add_step_listener(listener)
            host.start()
        except Exception as exc:  # capture must never break the program
            self._fail("host capture could not start", exc)
            return
        self.host = host
        self.running = True

    def stop(self, keep_hooks: bool = False) -> Tables:
        """Stop sampling and take what is left; ``keep_hooks``: step boundaries still come."""
        if self.host is None or not self.running:
            return {}
        self.running = False
        try:
            self.host.stop(keep_hooks=keep_hooks)
            return self.host.drain()
        except Exception as exc:
            self._fail("host capture failed to stop", exc)
            return {}

    def release_hooks(self) -> None:
        """Take out the step hooks a ``stop(keep_hooks=True)`` left in."""
        if self.host is None:
            return
        try:
            self.host.release_hooks()
        except Exception as exc:
            self._fail("host hooks could not be removed", exc)

    def drain(self) -> Tables:
        if self.host is None or not self.running:
            return {}
        try:
            return self.host.drain()
        except Exception as exc:
            self._fail("drain failed", exc)
            return {}

    def mark_step(self) -> bool:
        """A manual boundary through the running host (its listener sees it); False when no
        host runs (the caller handles the boundary itself)."""
        if self.host is None or not self.running:
            return False
        self.host.mark_step()
        return True

    # -- the GPU's pace in the window and after it (capture.util_pace; hosts without it: no-ops)
    def pace_opened(self, now_ns: int) -> None:
        pace = pace_of(self.host)
        if pace is not None:
            pace.opened(now_ns)

    def pace_closed(self, now_ns: int, sample_after: bool) -> None:
        """The window closed; ``sample_after``: keep sampling after it (no step to time)."""
        pace = pace_of(self.host)
        if pace is not None:
            pace.closed(now_ns, sample_after)

    def end_after_window(self) -> None:
        """Stop the sampling after the window (the process is ending)."""
        end = getattr(self.host, "end_after_window", None)
        if callable(end):
            try:
                end()
            except Exception as exc:
                self._fail("the sampling after the window failed to stop", exc)

    def pace_figures(self) -> dict[str, Any]:
        pace = pace_of(self.host)
        return pace.figures() if pace is not None else {}

    def for_manifest(self) -> tuple[dict[str, Any] | None, tuple[Diagnostic, ...]]:
        """The host's settings for the manifest and its diagnostics (None: no host ran)."""
        if self.host is None:
            return None, ()
        try:
            return self.host.settings_for_manifest(), tuple(self.host.diagnostics)
        except Exception:
            return None, ()


__all__ = ["HostFactory", "HostSlot"]
