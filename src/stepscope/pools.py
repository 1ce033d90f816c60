"""What the two rank-parallel layers share about their worker processes: the rank-parallel
import (``importers.engines``, ``importers.dask_engine``) and the rank-parallel analysis
(``analysis.rank_pool``). Each keeps its own tasks, ordering and error messages; here are the
start method of a local pool's workers and the Dask client's life (both layers may import this
module; they do not import each other).
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import forkserver
from typing import Any

from stepscope.errors import StepscopeError

DASK_MISSING = ("--engine dask needs Dask's distributed scheduler, which is not installed: "
                "pip install 'stepscope[dask]'")
CONNECT_TIMEOUT_S = 30


def forkserver_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """Workers start clean: ``forkserver`` where there is one (a fork of a process that runs
    threads, pyarrow's or DuckDB's, can deadlock), else ``spawn``. The fork server imports the
    ``preload`` modules once (pyarrow, numpy, the workers' code: ~0.5 s of CPU) and each worker
    is a fork of it, so a worker starts in milliseconds instead of importing them again. The
    server starts now, with one OpenBLAS thread as the command line's own numpy (``cli.main``)
    unless the user chose: its numpy is the workers'."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    given = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = given or "1"
    try:
        forkserver.ensure_running()
    finally:
        if given is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
    return ctx


def distributed() -> Any:
    """The ``distributed`` module; ``StepscopeError`` (one line) when it is not installed."""
    try:
        return importlib.import_module("distributed")
    except ImportError:
        raise StepscopeError(DASK_MISSING) from None


@contextmanager
def dask_client(address: str, workers: int) -> Iterator[tuple[Any, list[Any]]]:
    """``(client, futures)``: a client of the Dask scheduler at ``address``, or of a local
    cluster of ``workers`` single-threaded worker processes when ``address`` is empty, and the
    list the caller appends its futures to. On leaving, the futures not done are cancelled and
    a cluster this made is closed."""
    dd = distributed()
    cluster = None
    try:
        if address:
            client = dd.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        else:
            cluster = dd.LocalCluster(n_workers=max(1, workers), threads_per_worker=1,
                                      processes=True, dashboard_address=None,
                                      silence_logs=logging.ERROR)
            client = dd.Client(cluster, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        where = address or "a local cluster"
        raise StepscopeError(f"--engine dask: cannot reach {where} ({exc})") from None
    futures: list[Any] = []
    try:
        yield client, futures
    finally:
        client.cancel([f for f in futures if not f.done()])
        client.close()
        if cluster is not None:
            cluster.close()


__all__ = ["CONNECT_TIMEOUT_S", "DASK_MISSING", "dask_client", "distributed",
           "forkserver_context"]
