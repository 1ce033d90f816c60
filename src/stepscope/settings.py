"""Every ``STEPSCOPE_*`` environment variable, read in one place (``Settings.from_env``).

Most are knobs of the capture that the overhead benchmarks turn; none is needed for normal use.
Documented for users in ``docs/settings.md``; the table there and :data:`VARIABLES` say the same.

| variable | meaning | values | default |
|---|---|---|---|
| ``STEPSCOPE_CAPTURE`` | the capture's configuration (JSON), set by ``stepscope record`` for the program it runs: each Python interpreter of the program starts the capture when it is set | JSON | unset |
| ``STEPSCOPE_CUPTI_API_VIA`` | how CUPTI records the kept runtime/driver calls | ``callbacks``, ``activity`` | ``callbacks`` |
| ``STEPSCOPE_CUPTI_DETACH`` | detach CUPTI after the capture; ``always`` even after CUDA graphs ran under it (a hazard check for GPUs) | ``1``, ``0``, ``always`` | ``1`` |
| ``STEPSCOPE_CUPTI_DUMP`` | keep the raw CUPTI buffers in this folder | a folder | unset |
| ``STEPSCOPE_CUPTI_LIB`` | the ``libcupti.so`` to load | a file | found on ``sys.path``, ``CUDA_HOME`` |
| ``STEPSCOPE_CUPTI_NESTED_DRIVER`` | also record driver calls made inside recorded runtime calls | ``0``, ``1`` | ``0`` |
| ``STEPSCOPE_CUPTI_PREPARED_BUFFERS`` | CUPTI buffers made ahead at start | an integer >= 0 | ``4`` |
| ``STEPSCOPE_CUPTI_SYNC`` | record CUPTI's GPU-side synchronization records | ``0``, ``1`` | ``0`` |
| ``STEPSCOPE_CUPTI_ZEROED_BUFFERS`` | tell CUPTI its buffers are zero-filled already | ``1``, ``0`` | ``1`` |
| ``STEPSCOPE_IMPORT_ENGINE`` | where ``stepscope import`` reads the ranks when ``--engine`` is not given: a local process pool, or a Dask cluster (local, or the scheduler at ``ADDRESS``) | ``process``, ``dask``, ``dask:ADDRESS`` | ``process`` |
| ``STEPSCOPE_IMPORT_WORKERS`` | how many ranks ``stepscope import`` reads at once when ``--workers`` is not given (``1``: one after another) | an integer >= 1 | from the traces' size, the cores and the memory |
| ``STEPSCOPE_KINETO_NATIVE`` | the compiled Kineto reader (``0``, ``false``, ``no``, ``off``: the Python one) | on/off | on |
| ``STEPSCOPE_SAMPLER_PROCESS`` | sample psutil/NVML in a separate process (``0``: a thread of the program) | ``1``, ``0`` | ``1`` |
| ``STEPSCOPE_TORCH_DRIVER_CALLS`` | the driver calls kept in a torch process (comma-separated; empty: none) | names | the launches |

Reading never fails: a value that cannot be understood means the default (the capture runs
inside the user's program, which a bad variable must not crash). This module imports nothing
but the standard library's ``os`` and ``dataclasses``: the capture's bootstrap imports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

CAPTURE_VAR = "STEPSCOPE_CAPTURE"
_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    """The ``STEPSCOPE_*`` variables, understood (module docstring)."""

    capture: str | None = None  # STEPSCOPE_CAPTURE, the capture's JSON configuration
    cupti_api_via: str = "callbacks"  # "callbacks" | "activity"
    cupti_detach: bool = True
    cupti_detach_with_graphs: bool = False  # STEPSCOPE_CUPTI_DETACH=always
    cupti_dump: str | None = None
    cupti_lib: str | None = None
    cupti_nested_driver: bool = False
    cupti_prepared_buffers: int = 4
    cupti_sync: bool = False
    cupti_zeroed_buffers: bool = True
    import_engine: str = "process"  # "process" | "dask" | "dask:ADDRESS"
    import_workers: int | None = None  # None: chosen (importers.engines.plan_workers)
    kineto_native: bool = True
    sampler_process: bool = True
    torch_driver_calls: frozenset[str] | None = None  # None: the capture's default

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``environ`` (default: this process's environment)."""
        env = os.environ if environ is None else environ

        def get(name: str, default: str) -> str:
            return env.get(f"STEPSCOPE_{name}", default).strip()

        detach = get("CUPTI_DETACH", "1")
        prepared = get("CUPTI_PREPARED_BUFFERS", "4")
        driver_calls = env.get("STEPSCOPE_TORCH_DRIVER_CALLS")
        workers = get("IMPORT_WORKERS", "")
        engine = get("IMPORT_ENGINE", "process")
        return cls(
            capture=env.get(CAPTURE_VAR) or None,
            cupti_api_via="activity" if get("CUPTI_API_VIA", "callbacks") == "activity"
            else "callbacks",
            cupti_detach=detach != "0",
            cupti_detach_with_graphs=detach == "always",
            cupti_dump=env.get("STEPSCOPE_CUPTI_DUMP") or None,
            cupti_lib=env.get("STEPSCOPE_CUPTI_LIB") or None,
            cupti_nested_driver=get("CUPTI_NESTED_DRIVER", "0") == "1",
            cupti_prepared_buffers=max(0, int(prepared)) if prepared.isdigit() else 4,
            cupti_sync=get("CUPTI_SYNC", "0") == "1",
            cupti_zeroed_buffers=get("CUPTI_ZEROED_BUFFERS", "1") != "0",
            import_engine=engine if engine in ("process", "dask") or engine.startswith("dask:")
            else "process",
            import_workers=int(workers) if workers.isdigit() and int(workers) > 0 else None,
            kineto_native=get("KINETO_NATIVE", "1").lower() not in _OFF,
            sampler_process=env.get("STEPSCOPE_SAMPLER_PROCESS", "1") != "0",
            torch_driver_calls=None if driver_calls is None
            else frozenset(x.strip() for x in driver_calls.split(",") if x.strip()),
        )


VARIABLES = ("STEPSCOPE_CAPTURE", "STEPSCOPE_CUPTI_API_VIA", "STEPSCOPE_CUPTI_DETACH",
             "STEPSCOPE_CUPTI_DUMP", "STEPSCOPE_CUPTI_LIB", "STEPSCOPE_CUPTI_NESTED_DRIVER",
             "STEPSCOPE_CUPTI_PREPARED_BUFFERS", "STEPSCOPE_CUPTI_SYNC",
             "STEPSCOPE_CUPTI_ZEROED_BUFFERS", "STEPSCOPE_IMPORT_ENGINE",
             "STEPSCOPE_IMPORT_WORKERS", "STEPSCOPE_KINETO_NATIVE",
             "STEPSCOPE_SAMPLER_PROCESS", "STEPSCOPE_TORCH_DRIVER_CALLS")
