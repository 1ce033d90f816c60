"""The Python API of live capture: ``record(...)`` (in-process) and ``step()``.

>>> with stepscope.record(out="run", steps="5-20") as r:    # doctest: +SKIP
...     for batch in loader:
...         train_step(batch)
...         r.step()            # not needed when a torch optimizer steps (its hook marks steps)

``step()`` marks a step boundary for the capture running in this process (``stepscope record``'s
injected one, or an enclosing ``record``); it does nothing otherwise, so it can stay in the code.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.process import mark_step, pop, push
from stepscope.capture.schedule import make_schedule
from stepscope.capture.staging_folder import make_staging
from stepscope.errors import CaptureError


class Recording:
    """A capture of this process, written to ``out`` when the ``with`` block ends."""

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        steps: str | None = None,
        delay: float | None = None,
        duration: float | None = None,
        sample_hz: float = 10.0,
        stacks: bool = True,
        hooks: bool = True,
        backend: str = "auto",
        gpu_api: str = "filtered",
        max_rows: int = 2_000_000,
        overwrite: bool = False,
        flight_recorder: bool = True,
    ) -> None:
        self.out = Path(out)
        self.overwrite = overwrite
        self._schedule = make_schedule(steps, delay, duration)
        self._options: dict[str, Any] = {"sample_hz": sample_hz, "stacks": stacks, "hooks": hooks,
                                         "backend": backend, "gpu_api": gpu_api,
                                         "max_rows": max_rows,
                                         "flight_recorder": flight_recorder}
        self._staging: Path | None = None
        self._session: Session | None = None
        self.path: Path | None = None  # the run folder, once written

    def __enter__(self) -> Recording:
        if self.out.exists() and not self.overwrite:
            raise CaptureError(f"{self.out}: already exists (pass overwrite=True or choose another out)")
        self._staging = make_staging(self.out)
        config = CaptureConfig(staging=str(self._staging), schedule=self._schedule,
                               sample_hz=float(self._options["sample_hz"]),
                               stacks=bool(self._options["stacks"]), hooks=bool(self._options["hooks"]),
                               gpu=str(self._options["backend"]), gpu_api=str(self._options["gpu_api"]),
                               max_rows=int(self._options["max_rows"]),
                               flight_recorder=bool(self._options["flight_recorder"]))
        self._session = Session(config, argv=tuple(sys.argv))
        push(self._session)
        self._session.begin()
        return self

    def step(self) -> None:
        """Mark a step boundary (step k ends, step k+1 begins)."""
        if self._session is not None:
            self._session.step()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        session, staging = self._session, self._staging
        if session is None or staging is None:
            return
        try:
            session.finish(None if et is None else f"exception: {et.__name__}")
        finally:
            pop(session)
        from stepscope.capture.partitions import merge  # pyarrow only when writing
        from stepscope.importers import parse_kineto  # reads --backend torch's trace

        try:
            self.path = merge(staging, self.out, command=list(sys.argv), returncode=0,
                              overwrite=self.overwrite, settings={"window": self._schedule.describe(),
                                                                  "api": "stepscope.record"},
                              read_trace=parse_kineto)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def record(
    out: str | os.PathLike[str] = "stepscope-run",
    *,
    steps: str | None = None,
    delay: float | None = None,
    duration: float | None = None,
    sample_hz: float = 10.0,
    stacks: bool = True,
    hooks: bool = True,
    backend: str = "auto",
    gpu_api: str = "filtered",
    max_rows: int = 2_000_000,
    overwrite: bool = False,
    flight_recorder: bool = True,
) -> Recording:
    """Capture this process inside a ``with`` block (see the module doc). ``backend``,
    ``gpu_api`` and ``flight_recorder`` are ``stepscope record``'s ``--backend``, ``--gpu-api``
    and (off) ``--no-flight-recorder``; the flight recorder is sized only if torch.distributed
    has made no process group yet."""
    return Recording(out, steps=steps, delay=delay, duration=duration, sample_hz=sample_hz,
                     backend=backend, gpu_api=gpu_api, max_rows=max_rows,
                     stacks=stacks, hooks=hooks, overwrite=overwrite,
                     flight_recorder=flight_recorder)


def step() -> None:
    """Mark a step boundary for the active capture; a no-op when nothing is capturing."""
    mark_step()


__all__ = ["Recording", "record", "step"]
