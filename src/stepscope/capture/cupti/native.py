"""Find, build and load the C buffer shim (``_shim.c``) and libcupti, through ctypes.

The shim is compiled when the package is installed (an optional setuptools extension) and, when
that did not happen (a source checkout, a machine that had no compiler at install time), once on
first use with the system C compiler into the user cache (``$XDG_CACHE_HOME/stepscope``), keyed
by the source's hash. It needs no Python headers: a plain shared library.

libcupti is taken, in order: already mapped into this process (a framework loaded it: using the
same copy matters, a second CUPTI in one process would fight the first), ``STEPSCOPE_CUPTI_LIB``,
the ``nvidia-cuda-cupti`` wheels on ``sys.path``, ``$CUDA_HOME/extras/CUPTI/lib64``, the loader's
search path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stepscope.errors import CaptureError
from stepscope.settings import Settings

HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "_shim.c"
_WHEEL_GLOBS = ("nvidia/cu13/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*",
                "nvidia/cu12/lib/libcupti.so*")


class Unavailable(CaptureError):
    """GPU capture cannot run here; the message says why (shown to the user)."""


def mapped_libcupti(maps: Path = Path("/proc/self/maps")) -> str | None:
    try:
        text = maps.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        path = line.split(None, 5)[-1] if line.count(" ") >= 5 else ""
        if "/libcupti.so" in path:
            return path.strip()
    return None


def find_libcupti(environ: Mapping[str, str] | None = None,
                  paths: Sequence[str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    got = mapped_libcupti()
    if got:
        return got
    explicit = Settings.from_env(env).cupti_lib
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for base in (sys.path if paths is None else paths):
        for pattern in _WHEEL_GLOBS:
            hits = sorted(glob.glob(os.path.join(base or ".", pattern)))
            if hits:
                return hits[-1]
    for root in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            hits = sorted(glob.glob(os.path.join(root, "extras/CUPTI/lib64/libcupti.so*")))
            if hits:
                return hits[-1]
    return ctypes.util.find_library("cupti")


SHIM_ABI = 8  # ss_abi_version() of _shim.c


def _abi(path: Path) -> int | None:
    try:
        fn = ctypes.CDLL(str(path)).ss_abi_version
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return int(fn())


def _prebuilt() -> Path | None:
    """The extension built at install time, if it is of this source's ABI (a stale in-place
    build of an older checkout is not used: the source is built into the cache instead)."""
    for hit in sorted(HERE.glob("_ss_cupti*.so")):
        if _abi(hit) == SHIM_ABI:
            return hit
    return None


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stepscope"


def build_shim(dest_dir: Path | None = None, compiler: str | None = None) -> Path:
    """Compile the shim into the cache (idempotent). Raises Unavailable without a compiler."""
    src = SHIM_SOURCE.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    out_dir = dest_dir or cache_dir()
    target = out_dir / f"libss_cupti-{digest}.so"
    if target.is_file():
        return target
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("the CUPTI buffer shim is not built and no C compiler was found "
                          "(install stepscope with a compiler present, or set CC)")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{target.name}.{os.getpid()}.tmp"
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SHIM_SOURCE), "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"could not build the CUPTI buffer shim with {cc}: {exc}") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["?"])[0]
        raise Unavailable(f"could not build the CUPTI buffer shim with {cc}: {first}")
    os.replace(tmp, target)
    return target


def shim_notice(environ: Mapping[str, str] | None = None) -> str | None:
    """What to tell a user who records on a machine with CUPTI when the shim was not built at
    install time and is not in the cache yet (the first capture must compile it); None when
    it is there, or when there is no CUPTI here (no GPU capture to make)."""
    if _prebuilt() is not None or find_libcupti(environ) is None:
        return None
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:16]
    if (cache_dir(environ) / f"libss_cupti-{digest}.so").is_file():
        return None
    env = os.environ if environ is None else environ
    has_cc = bool(env.get("CC") or shutil.which("cc") or shutil.which("gcc"))
    return ("the CUPTI buffer shim (stepscope.capture.cupti._ss_cupti) is not installed: "
            + ("the first GPU capture compiles it with the C compiler" if has_cc else
               "no C compiler was found, so GPU capture cannot run")
            + "; install a stepscope wheel, which ships it built")


def load_shim(path: Path | None = None) -> ctypes.CDLL:
    """The shim with its signatures set (built on demand)."""
    lib_path = path or _prebuilt() or build_shim()
    lib = ctypes.CDLL(str(lib_path))
    vp, sz, u32p, u64p = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint32), \
        ctypes.POINTER(ctypes.c_uint64)
    lib.ss_configure.argtypes = [sz, sz]
    lib.ss_configure.restype = ctypes.c_int
    lib.ss_take.argtypes = [ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.c_int]
    lib.ss_take.restype = ctypes.c_int
    lib.ss_release.argtypes = [vp, sz]
    lib.ss_release.restype = None
    lib.ss_prepare.argtypes = [ctypes.c_int]
    lib.ss_prepare.restype = ctypes.c_int
    lib.ss_trim.argtypes = []
    lib.ss_trim.restype = None
    lib.ss_stats.argtypes = [u64p]
    lib.ss_stats.restype = None
    lib.ss_walk.argtypes = [vp, sz, u32p, u32p, u64p, sz, ctypes.POINTER(sz)]
    lib.ss_walk.restype = sz
    lib.ss_check_walk.argtypes = [vp, vp, sz, u32p, u32p, u64p, u32p]
    lib.ss_check_walk.restype = ctypes.c_long
    lib.ss_scan.argtypes = [vp, sz, sz, u32p, u32p, u32p, u64p, u64p, sz, ctypes.POINTER(sz),
                            ctypes.POINTER(sz)]
    lib.ss_scan.restype = sz
    lib.ss_seen_reset.argtypes = []
    lib.ss_seen_reset.restype = None
    lib.ss_write_frame.argtypes = [ctypes.c_int, vp, ctypes.c_uint64]
    lib.ss_write_frame.restype = ctypes.c_long
    lib.ss_detach_arm.argtypes = [vp, vp]
    lib.ss_detach_arm.restype = None
    lib.ss_detach_state_get.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ss_detach_state_get.restype = ctypes.c_int
    lib.ss_detach_reset.argtypes = [ctypes.POINTER(vp)]
    lib.ss_detach_reset.restype = ctypes.c_int
    lib.ss_buffer_requested.argtypes = [ctypes.POINTER(vp), ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.ss_buffer_requested.restype = None
    lib.ss_buffer_completed.argtypes = [vp, ctypes.c_uint32, vp, sz, sz]
    lib.ss_buffer_completed.restype = None
    lib.ss_api_begin.argtypes = [vp, ctypes.c_uint32, ctypes.c_int]
    lib.ss_api_begin.restype = None
    lib.ss_api_end.argtypes = []
    lib.ss_api_end.restype = None
    lib.ss_api_complete.argtypes = []
    lib.ss_api_complete.restype = None
    lib.ss_api_stats.argtypes = [u64p]
    lib.ss_api_stats.restype = None
    lib.ss_api_mark_graph.argtypes = [ctypes.c_int, ctypes.c_uint32]
    lib.ss_api_mark_graph.restype = None
    lib.ss_api_graph_launches.argtypes = []
    lib.ss_api_graph_launches.restype = ctypes.c_uint64
    lib.ss_api_graph_forget.argtypes = []
    lib.ss_api_graph_forget.restype = None
    return lib


def load_libcupti(path: str) -> ctypes.CDLL:
    """libcupti with the signatures used here."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise Unavailable(f"cannot load libcupti ({path}): {exc}") from None
    i, u8, u32, vp, sz = ctypes.c_int, ctypes.c_uint8, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
    sigs: dict[str, list[object]] = {
        "cuptiGetVersion": [ctypes.POINTER(u32)],
        "cuptiActivityRegisterCallbacks": [vp, vp],
        "cuptiActivityEnable": [i],
        "cuptiActivityDisable": [i],
        "cuptiActivityFlushAll": [u32],
        "cuptiActivityGetNumDroppedRecords": [vp, u32, ctypes.POINTER(sz)],
        "cuptiGetResultString": [i, ctypes.POINTER(ctypes.c_char_p)],
        "cuptiGetCallbackName": [i, u32, ctypes.POINTER(ctypes.c_char_p)],
        "cuptiActivityEnableRuntimeApi": [u32, u8],
        "cuptiActivityEnableDriverApi": [u32, u8],
        "cuptiGetTimestamp": [ctypes.POINTER(ctypes.c_uint64)],
        "cuptiFinalize": [],
        "cuptiSubscribe": [ctypes.POINTER(vp), vp, vp],
        "cuptiUnsubscribe": [vp],
        "cuptiEnableDomain": [u32, vp, i],
        "cuptiEnableCallback": [u32, vp, i, u32],
        "cuptiActivitySetAttribute": [i, ctypes.POINTER(sz), vp],
    }
    optional = {"cuptiActivityEnableRuntimeApi", "cuptiActivityEnableDriverApi",  # older CUPTI:
                "cuptiFinalize", "cuptiSubscribe", "cuptiUnsubscribe", "cuptiEnableDomain",
                "cuptiEnableCallback", "cuptiActivitySetAttribute"}
    for name, args in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            if name in optional:  # the whole-domain switch is used; CUPTI stays attached
                continue
            raise Unavailable(f"{path} lacks {name} (CUPTI too old)")
        fn.argtypes = args
        fn.restype = i
    return lib


ZEROED_OUT_ACTIVITY_BUFFER = 5  # CUpti_ActivityAttribute: CUPTI_ACTIVITY_ATTR_ZEROED_OUT_...


def set_zeroed_buffers(lib: object, on: bool) -> bool:
    """Tell CUPTI whether the buffers it is given are zero-filled already (the shim's are), so
    that it does not zero each one itself in the program's thread that asks for it. Set before
    the buffer callbacks are registered; set back to off after the capture (another CUPTI client
    of the process, torch.profiler, hands CUPTI buffers that are not). True when CUPTI took it."""
    fn = getattr(lib, "cuptiActivitySetAttribute", None)
    if fn is None:
        return False
    value, size = ctypes.c_uint8(1 if on else 0), ctypes.c_size_t(1)
    return bool(fn(ZEROED_OUT_ACTIVITY_BUFFER, ctypes.byref(size), ctypes.byref(value)) == 0)


def gil_held(fn: Any) -> Any:
    """``fn``, a function of libcupti loaded with its argument types, called *without* releasing
    the GIL (ctypes releases it for every foreign call), for the calls that switch CUPTI on.
    The default window's fallback starts the capture from its watcher thread, and with the GIL
    released the program's thread ran on into CUDA calls while CUPTI switched them on: an eager
    launch loop crashed (SIGSEGV) in 2 of 9 such recordings on the H100 (2026-11-26), with the
    watcher inside those calls. Holding the GIL keeps the program's Python threads between two
    bytecodes meanwhile (threads in C++ that released it still run); docs/record.md says what
    was checked after. Anything else (the tests' stand-in libcupti) is returned as it is."""
    cfuncptr: type = getattr(ctypes, "_CFuncPtr")
    if not isinstance(fn, cfuncptr) or getattr(fn, "argtypes", None) is None:
        return fn
    f: Any = fn
    proto = ctypes.PYFUNCTYPE(f.restype, *f.argtypes)
    addr = ctypes.cast(f, ctypes.c_void_p).value
    return proto(addr) if addr else fn


THREAD_ID_TYPE_SYSTEM = 1  # CUpti_ActivityThreadIdType: CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM


def set_thread_id_type(lib: object, kind: int) -> int | None:
    """Make CUPTI's activity records carry ``kind`` thread ids (SYSTEM: ``gettid``, the ids of the
    host tables, as the shim's call records have them; CUPTI's default is ``pthread_self``).
    Returns the type it had, to set back after the capture; None where it could not be set."""
    get = getattr(lib, "cuptiGetThreadIdType", None)
    put = getattr(lib, "cuptiSetThreadIdType", None)
    if get is None or put is None:
        return None
    prev = ctypes.c_int(0)
    if get(ctypes.byref(prev)) != 0 or put(ctypes.c_int(kind)) != 0:
        return None
    return int(prev.value)


def shim_walk(shim: ctypes.CDLL, ptr: int, valid: int, sizes: ctypes.Array[ctypes.c_uint32]
              ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64], int]:
    """The shim's record walk of the buffer at ``ptr``: (kinds, offsets, where it stopped)."""
    cap = valid // 16 + 1
    kinds = np.empty(cap, dtype=np.uint32)
    offs = np.empty(cap, dtype=np.uint64)
    stop = ctypes.c_size_t(0)
    n = shim.ss_walk(ptr, valid, sizes, kinds.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)),
                     offs.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), cap, ctypes.byref(stop))
    return kinds[:n], offs[:n], int(stop.value)


def demangler() -> Callable[[str], str]:
    """A C++ name demangler (libstdc++'s ``__cxa_demangle``); names it cannot demangle, and every
    name where libstdc++ is missing, come back as they are."""
    try:
        cxx = ctypes.CDLL("libstdc++.so.6")
        libc = ctypes.CDLL(None)
        fn = cxx.__cxa_demangle
    except (OSError, AttributeError):
        return lambda s: s
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def demangle(name: str) -> str:
        if not name.startswith("_Z"):
            return name
        status = ctypes.c_int(0)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if not ptr or status.value != 0:
            return name
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            libc.free(ptr)

    return demangle
