"""Decoding CUPTI buffers recorded on a GPU (H100, driver 580.159.04; tests/data/cupti, written by
benchmarks/capture/record_fixtures.sh). Each file holds the raw buffers, the strings they point to,
and libcupti's own walk of every buffer (cuptiActivityGetNextRecord), so the record walk is checked
against NVIDIA's, and the decoded fields against what the recorded programs did:

  torch    benchmarks/capture/gpu_train.py --nvtx (batches of 64 x 1024 fp32 from pinned memory)
  cupy     benchmarks/capture/cupy_loop.py (a 2048 x 2048 raw kernel, 4 MiB host copies)
  jax      benchmarks/capture/jax_train.py while XLA compiles (driver-API launches, NVTX ranges
           nested four deep)
  cupti12  the CuPy loop through CUPTI 12.8 (API version 26): the CUDA 12 record layout; CUPTI 12
           also writes CUDA-event records (kind 36), a kind stepscope does not decode
"""

from __future__ import annotations

import ctypes
import json
import shutil
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.capture.cupti.records import replay_iterator

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import DecodeContext, Decoder, walk_py
from stepscope.capture.cupti.native import build_shim, demangler, load_shim

DATA = Path(__file__).parents[2] / "data" / "cupti"
needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler")


class Recorded:
    def __init__(self, name: str) -> None:
        z = np.load(DATA / f"cupti-{name}.npz")
        self.meta: dict[str, Any] = json.loads(bytes(z["meta"]).decode())
        keys = sorted(k[4:] for k in z.files if k.startswith("buf_"))
        self.buffers = [np.ascontiguousarray(z[f"buf_{k}"]) for k in keys]
        self.walks = [z[f"walk_{k}"] for k in keys]  # libcupti's (offset, kind) per record
        chosen = L.layouts_for(int(self.meta["cupti_api_version"]))
        assert chosen is not None and chosen.name == self.meta["layout"]
        self.layouts = chosen.table

    def sizes(self) -> list[int]:
        return L.size_table(self.layouts)

    def context(self) -> DecodeContext:
        strings = {int(k): v for k, v in self.meta["strings"].items()}
        api = {tuple(int(x) for x in k.split(":")): v for k, v in self.meta["api_names"].items()}
        return DecodeContext(strings=strings.get, api_name=lambda d, c: api.get((d, c)),
                             demangle=demangler())

    def decode(self, sizes: list[int] | None = None) -> tuple[Decoder, dict[str, dict[str, Any]]]:
        dec = Decoder(self.layouts, self.context())
        for buf in self.buffers:
            kinds, offs, stop = walk_py(buf, sizes or self.sizes())
            assert stop == len(buf)
            dec.add(buf, kinds, offs)
        return dec, dec.tables()


@cache
def recorded(name: str) -> Recorded:
    return Recorded(name)


def launches_match(t: dict[str, dict[str, Any]]) -> None:
    """Every kernel was launched by an API call of the same correlation id that started before it,
    except kernels launched before every API domain was recording (CUPTI numbers calls in order:
    a lower correlation id than the first recorded call of the domain switched on last)."""
    api = t["api_calls"]
    launch = {c: (n, ts) for c, n, ts in zip(api["correlation"], api["name"], api["ts_ns"])}
    first = max(min(c for c, d in zip(api["correlation"], api["domain"]) if d == dom)
                for dom in set(api["domain"]))
    k = t["kernels"]
    linked = 0
    for corr, ts in zip(np.asarray(k["correlation"]).tolist(), np.asarray(k["ts_ns"]).tolist()):
        if corr not in launch:
            assert corr < first, f"kernel of correlation {corr} has no launch record"
            continue
        name, api_ts = launch[corr]
        assert name.startswith(("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")), name
        assert api_ts < ts
        linked += 1
    assert linked >= len(k["correlation"]) * 0.8
    assert (np.asarray(k["dur_ns"]) > 0).all() and (np.asarray(k["dur_ns"]) < 10**9).all()


@pytest.mark.parametrize("name", ["torch", "cupy", "jax"])
def test_walk_is_libcuptis_walk(name: str) -> None:
    r = recorded(name)
    assert r.meta["recorded_on"]["gpu"].startswith("NVIDIA H100")
    for buf, walk in zip(r.buffers, r.walks):
        kinds, offs, stop = walk_py(buf, r.sizes())
        assert stop == len(buf)
        assert offs.tolist() == walk[:, 0].tolist() and kinds.tolist() == walk[:, 1].tolist()


def test_torch_copies_kernels_and_nvtx_ranges() -> None:
    _, t = recorded("torch").decode()
    m = t["memcpy"]  # the host copy: each 64 x 1024 fp32 batch from the loader's pinned memory
    assert {x for x in zip(m["kind"], m["bytes"], m["src_kind"], m["dst_kind"]) if x[0] == "HtoD"} == {
        ("HtoD", 64 * 1024 * 4, "pinned", "device")}
    launches_match(t)
    names = t["kernels"]["name"]
    assert all(not n.startswith("_Z") for n in names)  # demangled
    assert any("at::native::" in n for n in names)
    a = t["annotations"]  # range_push("forward") / range_push("backward"), one each per step
    counts = Counter(a["name"])
    assert set(counts) == {"forward", "backward"} and abs(counts["forward"] - counts["backward"]) <= 1
    assert set(a["depth"]) == {0}
    api = t["api_calls"]
    copies = {c for c, n in zip(api["correlation"], api["name"]) if n == "cudaMemcpyAsync"}
    assert set(m["correlation"]) <= copies


def test_cupy_raw_kernel_launch_config_and_copies() -> None:
    _, t = recorded("cupy").decode()
    k = t["kernels"]
    scale = [i for i, n in enumerate(k["name"]) if n == "scale"]
    assert scale  # SCALE(((2048 * 2048 + 255) // 256,), (256,), ...)
    for i in scale:
        assert (k["grid_x"][i], k["grid_y"][i], k["grid_z"][i]) == (16384, 1, 1)
        assert (k["block_x"][i], k["block_y"][i], k["block_z"][i]) == (256, 1, 1)
    m = t["memcpy"]
    h2d = [b for kd, b in zip(m["kind"], m["bytes"]) if kd == "HtoD"]
    d2h = [(b, dst) for kd, b, dst in zip(m["kind"], m["bytes"], m["dst_kind"]) if kd == "DtoH"]
    assert set(h2d) == {(1 << 20) * 4}  # cp.asarray(np.ones(1 << 20, float32))
    assert set(d2h) == {(4, "pageable")}  # float(...) of a float32 scalar
    assert abs(len(scale) - len(h2d)) <= 1  # one of each per loop iteration
    launches_match(t)
    assert "stream" in t["sync"]["kind"]  # float() waits for the stream


def test_jax_driver_launches_and_nested_ranges() -> None:
    _, t = recorded("jax").decode()  # recorded while XLA was still compiling and autotuning
    launches_match(t)
    api = t["api_calls"]
    assert {n for n, d in zip(api["name"], api["domain"]) if d == "driver"} >= {"cuLaunchKernelEx"}
    a = t["annotations"]
    ids, names = a["id"].tolist(), a["name"]
    by_id = dict(zip(ids, names))
    ts = dict(zip(ids, np.asarray(a["ts_ns"]).tolist()))
    end = {i: s + d for i, s, d in zip(ids, np.asarray(a["ts_ns"]).tolist(),
                                       np.asarray(a["dur_ns"]).tolist())}
    depth = dict(zip(ids, a["depth"]))
    nested = [(i, p) for i, p in zip(ids, a["parent_id"]) if p is not None]
    assert max(a["depth"]) >= 3  # XLA's pass ranges open inside its pipeline ranges
    for i, p in nested:  # a child lies inside its parent, one level deeper
        assert ts[p] <= ts[i] and end[i] <= end[p] and depth[i] == depth[p] + 1
    assert any(by_id[i].startswith("XlaPass:") and by_id[p].startswith("XlaPassPipeline:")
               for i, p in nested)


@needs_cc
def test_cuda12_layout_with_an_unknown_kind_learnt_from_libcupti(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    r = recorded("cupti12")
    assert r.meta["cupti_api_version"] == 26 and r.meta["layout"] == "12"
    buf, walk = r.buffers[0], r.walks[0]
    assert L.CUDA_EVENT in walk[:, 1].tolist()
    kinds, _, stop = walk_py(buf, r.sizes())
    assert stop < len(buf)  # the table alone stops at the first CUDA-event record

    shim = load_shim(build_shim(tmp_path_factory.mktemp("shim")))
    raw = ctypes.create_string_buffer(bytes(buf), len(buf))
    base = ctypes.addressof(raw)
    starts = walk[:, 0].tolist()

    replay = replay_iterator(base, starts)

    sizes = (ctypes.c_uint32 * 64)(*r.sizes())
    kind, stride, learnt = ctypes.c_uint32(), ctypes.c_uint64(), ctypes.c_uint32()
    bad = shim.ss_check_walk(ctypes.cast(replay, ctypes.c_void_p), base, len(buf), sizes,
                             ctypes.byref(kind), ctypes.byref(stride), ctypes.byref(learnt))
    assert bad == -1 and learnt.value == 1 and sizes[L.CUDA_EVENT] == 56
    kinds, offs, stop = walk_py(buf, list(sizes))
    assert stop == len(buf) and offs.tolist() == starts

    dec, t = r.decode(list(sizes))
    assert dec.unknown_kinds == {L.CUDA_EVENT: Counter(walk[:, 1].tolist())[L.CUDA_EVENT]}
    k = t["kernels"]
    scale = {(g, b) for n, g, b in zip(k["name"], k["grid_x"].tolist(), k["block_x"].tolist())
             if n == "scale"}
    assert scale == {(16384, 256)}
    m = t["memcpy"]
    assert set(zip(m["kind"], m["bytes"])) == {("HtoD", 4 << 20), ("DtoH", 4)}
    launches_match(t)
