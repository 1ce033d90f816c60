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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.importers.rank_work import RankTask, Result, Submit, stage_rank
from stepscope.pools import dask_client, distributed


@contextmanager
def dask_pool(address: str, workers: int) -> Iterator[Submit]:
    """``submit(task)`` on the Dask scheduler at ``address``, or on a local cluster of
    ``workers`` single-threaded worker processes when ``address`` is empty. On leaving, the
    futures are cancelled and a cluster this made is closed (``pools.dask_client``)."""
    with dask_client(address, workers) as (client, futures):
        def submit(task: RankTask) -> Result:
            fut = client.submit(stage_rank, task, pure=False)
            futures.append(fut)
            return _Remote(fut, task)

        yield submit


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


__all__ = ["dask_pool"]
