"""torch.distributed's flight recorder, read by the capture: what each collective was.

CUPTI sees the NCCL kernels but not what they were called for. torch's flight recorder keeps,
for every collective and point-to-point call a process group issues (DDP's bucket all-reduces
from C++, FSDP's all-gathers and reduce-scatters, the program's own ``dist.*`` calls), its
operation, sizes, dtypes, group and sequence numbers in a ring buffer of metadata (no tensor
data). ``FlightRecorderTap``:

- **arms it** (``arm``): when the program imports torch and the user has not sized the buffer
  (``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_TRACE_BUFFER_SIZE``, ``TORCH_TRACE_BUFFER_SIZE``),
  it sets the variable that torch version reads to ``BUFFER_ENTRIES`` in the process's
  environment, right after ``import torch`` and so before any process group exists (torch
  reads it when it makes its first one). Only the variable that version knows is set: torch
  warns when it sees the deprecated name. Child processes (``torchrun`` workers) inherit it;
- **reads it** (``take``) when the window closes (and when the program ends without a window,
  for the tail): both recorders (NCCL's and, from torch 2.8, the generic one gloo writes to),
  pickle dumps without stack traces, the ``json`` variants where those are missing; the entries
  created inside the window become ``collectives`` rows (``capture.fr_rows``).

Reading is done once, outside the window: a dump holds the GIL while it converts the whole
buffer (measured on the 2-core dev box, torch 2.13 gloo: 0.3-0.7 s for 20,000 entries), which a
flush every few seconds inside the window would add to the steps it measures. A process killed
by SIGKILL or ``os._exit`` inside the window therefore has no rows from it (its NCCL kernels
are still there); exit, exceptions and SIGTERM close the window first.

Nothing here imports torch or fails the program: a missing API, a dump that raises or an empty
buffer is a diagnostic.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from stepscope.capture.config import CaptureConfig
from stepscope.capture.fr_rows import collective_rows, config_ranks, merge_entries
from stepscope.capture.hooks.post_import import PostImportFinder
from stepscope.store.manifest import Diagnostic

BUFFER_ENTRIES = 20_000  # a default window (50 steps) of FSDP on a 100-layer model fits
OLD_VAR = "TORCH_NCCL_TRACE_BUFFER_SIZE"  # torch < 2.8; deprecated (a warning) from 2.8 on
NEW_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_TRACE_BUFFER_SIZE")  # torch >= 2.8 reads one of them
BUFFER_VARS = (*NEW_VARS, OLD_VAR)

# (recorder, pickle dump, json dump) in torch._C._distributed_c10d
DUMPERS = (("nccl", "_dump_nccl_trace", "_dump_nccl_trace_json"),
           ("generic", "_dump_fr_trace", "_dump_fr_trace_json"))


def torch_version(text: str) -> tuple[int, int] | None:
    """``"2.11.0+cu130"`` -> ``(2, 11)``, ``"2.8.0a0+git"`` -> ``(2, 8)``; None when unreadable."""
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def buffer_vars(version: tuple[int, int] | None) -> tuple[str, ...]:
    """The variables that size the buffer in that torch, none of them a deprecated name."""
    if version is not None and version < (2, 8):
        return (OLD_VAR,)
    return NEW_VARS


def user_size(environ: Mapping[str, str]) -> str | None:
    """The buffer size the user chose (any of the names), else None."""
    for var in BUFFER_VARS:
        if var in environ:
            return f"{var}={environ[var]}"
    return None


@dataclass(frozen=True)
class Dump:
    """What the recorders held: their entries (each call once), the groups' ranks from
    ``pg_config``, the dump format versions, and what failed."""

    entries: tuple[Mapping[str, Any], ...]
    pg_ranks: dict[str, list[int]]
    recorders: dict[str, int]  # recorder -> entries it held
    versions: tuple[str, ...]
    errors: tuple[str, ...]
    apis: int  # dump functions found


def read_dumps(c10d: Any) -> Dump:
    """Dump every recorder ``c10d`` (``torch._C._distributed_c10d``) exposes."""
    dumps: list[list[Mapping[str, Any]]] = []
    ranks: dict[str, list[int]] = {}
    recorders: dict[str, int] = {}
    versions: list[str] = []
    errors: list[str] = []
    apis = 0
    for recorder, pickled, as_json in DUMPERS:
        fn, is_json = getattr(c10d, pickled, None), False
        if fn is None:
            fn, is_json = getattr(c10d, as_json, None), True
        if fn is None:
            continue
        apis += 1
        try:
            data = _call(fn, is_json)
        except Exception as exc:  # a recorder that cannot dump: the other may
            errors.append(f"{recorder}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(data, Mapping):
            errors.append(f"{recorder}: the dump is a {type(data).__name__}, not a dict")
            continue
        entries = [e for e in data.get("entries") or () if isinstance(e, Mapping)]
        dumps.append(entries)
        recorders[recorder] = len(entries)
        ranks.update(config_ranks(data.get("pg_config")))
        if data.get("version") is not None:
            versions.append(str(data["version"]))
    return Dump(entries=tuple(merge_entries(dumps)), pg_ranks=ranks, recorders=recorders,
                versions=tuple(sorted(set(versions))), errors=tuple(errors), apis=apis)


def _call(fn: Callable[..., Any], is_json: bool) -> Any:
    try:
        raw = (fn(includeCollectives=True, onlyActive=False) if is_json else
               fn(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    except TypeError:  # an older signature
        raw = fn()
    if is_json:
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    return pickle.loads(raw)  # noqa: S301 - bytes torch made in this process


def group_ranks(dist: Any) -> dict[str, list[int]]:
    """Every live process group's global ranks by group name (``torch.distributed``); empty
    once the groups are destroyed."""
    out: dict[str, list[int]] = {}
    world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
    names = getattr(world, "pg_names", None)
    members = getattr(world, "pg_group_ranks", None)
    if not isinstance(names, Mapping) or not isinstance(members, Mapping):
        return out
    for pg, name in list(names.items()):
        ranks = members.get(pg)
        if isinstance(ranks, Mapping) and ranks:
            # {global rank: group rank}, listed in group-rank order
            out[str(name)] = [int(g) for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])]
    return out


class FlightRecorderTap:
    """One process's use of the flight recorder (module doc). ``modules`` stands for
    ``sys.modules`` (tests give fakes); ``realtime``/``clock``: the recorder's clock
    (``CLOCK_REALTIME``) and the capture's."""

    def __init__(self, enabled: bool, environ: MutableMapping[str, str], *,
                 modules: Mapping[str, Any] | None = None,
                 clock: Callable[[], int] = time.time_ns,
                 realtime: Callable[[], int] = time.time_ns, off_because: str = "") -> None:
        """``off_because``: why a disabled tap is off (said in ``status``)."""
        self.enabled = enabled
        self._environ = environ
        self._modules: Mapping[str, Any] = sys.modules if modules is None else modules
        self._clock, self._realtime = clock, realtime
        self._finder: PostImportFinder | None = None
        self._groups: dict[str, list[int]] = {}
        self.status: dict[str, Any] = ({"state": "waiting for torch"} if enabled else
                                       {"state": "off", **({"why": off_because} if off_because
                                                           else {})})

    @staticmethod
    def for_capture(config: CaptureConfig, environ: Mapping[str, str],
                    clock: Callable[[], int]) -> FlightRecorderTap:
        """The session's tap: sizes the buffer in ``environ`` (``os.environ``, or a test's
        mapping); off with ``--no-flight-recorder``, and with ``--backend torch``, whose Kineto
        trace has the collectives (``record_param_comms``): not read twice."""
        env: MutableMapping[str, str] = (environ if isinstance(environ, MutableMapping)
                                         else dict(environ))
        torch_backend = config.gpu == "torch"
        why = ("--backend torch: the trace's record_param_comms"
               if torch_backend and config.flight_recorder else "")
        return FlightRecorderTap(config.flight_recorder and not torch_backend, env, clock=clock,
                                 off_because=why)

    # -- arming ----------------------------------------------------------------------------
    def arm(self) -> None:
        """Size the buffer now if torch is imported, else right after ``import torch``."""
        if not self.enabled:
            return
        torch = self._modules.get("torch")
        if torch is not None:
            self._arm(torch)
        elif self._modules is sys.modules and self._finder is None:
            self._finder = PostImportFinder({"torch": self._on_torch})
            self._finder.insert()

    def _on_torch(self, module: ModuleType) -> None:
        try:
            self._arm(module)
        except Exception as exc:  # never the user's import failing
            self.status = {"state": "failed", "error": f"{type(exc).__name__}: {exc}"}
        finally:
            self.disarm()

    def _arm(self, torch: Any) -> None:
        version = str(getattr(torch, "__version__", ""))
        # preset: by the user, or by this capture in a parent process (torchrun's agent)
        chosen = user_size(self._environ)
        if chosen is not None:
            self.status = {"state": "preset", "buffer": chosen, "torch": version}
            return
        names = buffer_vars(torch_version(version))
        for var in names:
            self._environ[var] = str(BUFFER_ENTRIES)
        self.status = {"state": "armed", "buffer": f"{names[0]}={BUFFER_ENTRIES}",
                       "torch": version}

    def disarm(self) -> None:
        """Take the import watcher out (the buffer size stays: groups already read it)."""
        if self._finder is not None:
            self._finder.remove()
            self._finder = None

    # -- reading ---------------------------------------------------------------------------
    def note_groups(self) -> None:
        """Remember the live process groups' ranks (they may be destroyed before the read)."""
        dist = self._modules.get("torch.distributed") if self.enabled else None
        if dist is None:
            return
        try:
            self._groups.update(group_ranks(dist))
        except Exception:  # a group being made on another thread: the read tries again
            pass

    def take_safely(self, rank: int, lo: int, hi: int
                    ) -> tuple[dict[str, dict[str, list[Any]]], list[Diagnostic]]:
        """``take``, with anything it raises turned into a diagnostic."""
        try:
            return self.take(rank, lo, hi)
        except Exception as exc:
            return {}, [Diagnostic("warning", "flight_recorder_failed",
                                   f"reading the flight recorder failed: {exc!r}")]

    def take(self, rank: int, lo: int, hi: int
             ) -> tuple[dict[str, dict[str, list[Any]]], list[Diagnostic]]:
        """The ``collectives`` rows of the calls issued in ``[lo, hi]`` (capture clock), and
        what to say about them; nothing at all when the program never imported
        ``torch.distributed``."""
        torch = self._modules.get("torch")
        dist = self._modules.get("torch.distributed")
        if not self.enabled or torch is None or dist is None:
            return {}, []
        c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
        dump = read_dumps(c10d)
        self.note_groups()
        # in use: a group exists now or existed when the window opened, or calls were recorded
        in_use = _initialized(dist) or bool(self._groups) or bool(dump.entries)
        diags: list[Diagnostic] = []
        if dump.errors:
            diags.append(Diagnostic("warning", "flight_recorder_failed",
                                    "reading torch.distributed's flight recorder failed ("
                                    + "; ".join(dump.errors) + "): collectives without sizes "
                                    "or groups"))
        if not dump.apis:
            if in_use:
                diags.append(Diagnostic(
                    "info", "flight_recorder_unavailable",
                    f"torch {getattr(torch, '__version__', '?')} has no flight-recorder dump "
                    "(_dump_nccl_trace, _dump_fr_trace): collectives without sizes or groups"))
            self.status = {**self.status, "read": "unavailable"}
            return {}, diags
        offset = 0 if self._clock is self._realtime else self._clock() - self._realtime()
        conv = collective_rows(dump.entries, rank=rank, lo=lo, hi=hi,
                               pg_ranks={**self._groups, **dump.pg_ranks},
                               device=_cuda_device(self._modules), offset_ns=offset)
        if not dump.entries and in_use and not dump.errors:
            diags.append(Diagnostic(
                "info", "flight_recorder_empty",
                "torch.distributed is in use but its flight recorder holds no entries (buffer "
                f"size {self.status.get('buffer') or 'unset'}; it is read when the first process "
                "group is made): collectives without sizes or groups"))
        lost = _maybe_lost(dump.entries, lo, offset)
        if lost and conv.rows:
            diags.append(Diagnostic(
                "warning", "flight_recorder_overflow",
                f"the flight recorder's ring buffer ({self.status.get('buffer') or 'its size'}) "
                "had overwritten calls older than the window's first recorded one: the "
                "window's first collectives may have no sizes or groups (a larger "
                "TORCH_FR_BUFFER_SIZE, or a shorter window, keeps them)"))
        self.status = {**self.status, "read": "ok", "recorders": dump.recorders,
                       "versions": list(dump.versions), "rows": conv.rows,
                       "before_window": conv.before, "after_window": conv.after}
        return ({"collectives": conv.columns} if conv.rows else {}), diags


def _initialized(dist: Any) -> bool:
    try:
        return bool(dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _cuda_device(modules: Mapping[str, Any]) -> int | None:
    """The current CUDA device, when CUDA is initialised already (never initialised here)."""
    cuda = modules.get("torch.cuda")
    try:
        if cuda is not None and cuda.is_initialized():
            return int(cuda.current_device())
    except Exception:
        pass
    return None


def _maybe_lost(entries: tuple[Mapping[str, Any], ...], lo: int, offset: int) -> bool:
    """Whether a recorder dropped entries that may lie in the window: its oldest kept entry
    is not its first (``record_id`` > 0) and was made after the window opened."""
    oldest: dict[Any, Mapping[str, Any]] = {}
    for e in entries:
        rid = e.get("record_id")
        if not isinstance(rid, int):
            continue
        key = str(e.get("profiling_name", "")).split(":", 1)[0]  # one ring per backend
        if key not in oldest or rid < int(oldest[key]["record_id"]):
            oldest[key] = e
    for e in oldest.values():
        created = e.get("time_created_ns")
        if int(e["record_id"]) > 0 and isinstance(created, int) and created + offset > lo:
            return True
    return False


__all__ = ["BUFFER_ENTRIES", "BUFFER_VARS", "Dump", "FlightRecorderTap", "buffer_vars",
           "group_ranks", "read_dumps", "torch_version", "user_size"]
