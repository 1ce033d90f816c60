"""A low-rate Python stack sampler of the training thread(s), to name call sites.

Every tick takes ``sys._current_frames()`` (a dict copy of each thread's current frame, made under
the GIL: the sampled thread is paused for the copy only) and formats the frames of the threads
asked for: the main thread plus the threads that were seen iterating a DataLoader or stepping an
optimizer (see ``HostCapture``). Formatting is cached per (code object, line) so a tick costs a few
microseconds per frame.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import CodeType, FrameType

MAX_DEPTH = 128
_CACHE_LIMIT = 50_000


class StackSampler:
    """Formats stacks innermost-last, one ``file:line function`` per line."""

    def __init__(self, *, skip_files: tuple[str, ...] = ()) -> None:
        self._cache: dict[tuple[CodeType, int], str] = {}
        self._skip = skip_files  # frames of these files (our own wrappers) are left out

    def sample(self, threads: Mapping[int, int]) -> list[tuple[int, str]]:
        """``threads``: Python thread ident -> native thread id. Returns ``(native_tid, frames)``."""
        frames = sys._current_frames()
        out: list[tuple[int, str]] = []
        for ident, native in threads.items():
            frame = frames.get(ident)
            if frame is not None:
                out.append((native, self.format(frame)))
        return out

    def format(self, frame: FrameType | None) -> str:
        lines: list[str] = []
        cache = self._cache
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            key = (code, frame.f_lineno)
            line = cache.get(key)
            if line is None:
                if code.co_filename in self._skip:
                    line = ""
                else:
                    line = f"{code.co_filename}:{frame.f_lineno} {code.co_name}"
                cache[key] = line
            if line:
                lines.append(line)
            frame = frame.f_back
            depth += 1
        if frame is not None:
            lines.append("... (truncated)")
        lines.reverse()
        return "\n".join(lines)
