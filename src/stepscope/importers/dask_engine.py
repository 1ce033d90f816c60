"""``--engine dask[:ADDRESS]``: the ranks of an import read by Dask workers (``distributed``),
for rank sets too large for one machine. Optional: ``pip install 'stepscope[dask]'``.

The per-rank work is the process pool's (``rank_work.stage_rank``). Workers write each rank's
tables into the import's parts folder, a sibling of the run being written, so the big tables
never pass through the scheduler or the client: only each rank's small facts do. On a cluster
of several machines the run's folder must therefore be on a file system every worker mounts
at the same path (NFS, Lustre, a shared volume), and every worker needs stepscope installed.

Why Dask rather than Ray: the work is a flat map of one function over files followed by one
gather of small results, which both do; Dask's ``distributed`` is pure Python on PyPI (a few MB;
Ray is a ~60 MB binary wheel per platform), runs a ``LocalCluster`` in-process for tests and
CI, and attaches to the schedulers HPC sites already run (``dask-jobqueue`` on Slurm/PBS).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.importers.rank_work import RankTask, Result, Submit, stage_rank

MISSING = ("--engine dask needs Dask's distributed scheduler, which is not installed: "
           "pip install 'stepscope[dask]'")
CONNECT_TIMEOUT_S = 30


def distributed() -> Any:
    """The ``distributed`` module; ``StepscopeError`` (one line) when it is not installed."""
    try:
        return importlib.import_module("distributed")
    except ImportError:
        raise StepscopeError(MISSING) from None


@contextmanager
def dask_pool(address: str, workers: int) -> Iterator[Submit]:
    """``submit(task)`` on the Dask scheduler at ``address``, or on a local cluster of
    ``workers`` single-threaded worker processes when ``address`` is empty. On leaving, the
    futures are cancelled and a cluster this made is closed."""
    dd = distributed()
    cluster = None
    try:
        if address:
            client = dd.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        else:
            cluster = dd.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=logging.ERROR)
            client = dd.Client(cluster, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        where = address or "a local cluster"
        raise StepscopeError(f"--engine dask: cannot reach {where} ({exc})") from None
    futures: list[Any] = []

    def submit(task: RankTask) -> Result:
        fut = client.submit(stage_rank, task, pure=False)
        futures.append(fut)
        return _Remote(fut, task)

    try:
        yield submit
    finally:
        client.cancel([f for f in futures if not f.done()])
        client.close()
        if cluster is not None:
            cluster.close()


class _Remote:
    """A Dask future whose worker was lost says so in one line."""

    def __init__(self, future: Any, task: RankTask) -> None:
        self.future = future
        self.task = task

    def result(self) -> Any:
        dd = distributed()
        try:
            return self.future.result()
        except (dd.KilledWorker, dd.CancelledError) as exc:
            raise StepscopeError(f"{self.task.path}: the Dask worker reading it was lost "
                                 f"({type(exc).__name__}; out of memory?)") from None


__all__ = ["MISSING", "dask_pool", "distributed"]
