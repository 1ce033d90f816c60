"""Which events of a GPU plane's stream lines are kernels, copies and memsets."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from importers.xspace.make import Plane, write
from stepscope.importers.xspace.device import copy_kind, copy_line
from stepscope.importers.xspace.parse import parse_xspace
from stepscope.schema_enums import CopyKind

US = 1_000_000  # ps


def test_copy_lines_are_those_that_only_copy() -> None:
    assert copy_line("Stream #15(MemcpyH2D)") and copy_line("Stream #16(MemcpyOther)")
    assert copy_line("Stream #17(MemcpyD2H,MemcpyH2D)")
    assert not copy_line("Stream #14(MemcpyD2H,Compute,Memset)")
    assert not copy_line("Stream #14(Compute)") and not copy_line("Stream #2")
    assert copy_kind("gemm_fusion_dot_3", "Stream #14(MemcpyD2H,Compute,Memset)") is None
    assert copy_kind("MemcpyD2H", "Stream #14(MemcpyD2H,Compute,Memset)") is CopyKind.DTOH
    assert copy_kind("some_copy", "Stream #15(MemcpyH2D)") is CopyKind.HTOD


def test_kernels_on_a_stream_that_also_copied_stay_kernels(tmp_path: Path) -> None:
    # JAX 0.11 on an H100 (a jax.debug.callback in the step): the compute stream's line is
    # "Stream #14(MemcpyD2H,Compute,Memset)"; every kernel was imported as a copy before
    gpu = Plane("/device:GPU:0", {"gpu_device_name": "NVIDIA H100 80GB HBM3", "core_count": 132,
                                  "compute_cap_major": 9, "compute_cap_minor": 0})
    s = gpu.line(14, "Stream #14(MemcpyD2H,Compute,Memset)")
    s.event("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN", 0, 100 * US, correlation_id=1)
    s.event("gemm_fusion_dot_3", 100 * US, 50 * US, correlation_id=2)
    s.event("memcpy128", 150 * US, 5 * US, correlation_id=3)  # XLA's copy kernel
    s.event("MemcpyD2H", 200 * US, 30 * US, correlation_id=4,
            memcpy_details="kind:DtoH size:8388608 dest:0 async:0")
    s.event("Memset 0", 240 * US, 2 * US, memset_details="size:64")
    c = gpu.line(18, "Stream #18(MemcpyD2H)")
    c.event("MemcpyD2H", 300 * US, 10 * US, correlation_id=5)
    path = write(tmp_path / "h.xplane.pb", [
        Plane("/host:metadata", {"jax_version": "0.11.2"}), gpu])
    t = parse_xspace(path, default_rank=0).tables
    assert t["kernels"].column("name").to_pylist() == [
        "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN", "gemm_fusion_dot_3", "memcpy128"]
    mc = t["memcpy"]
    assert mc.num_rows == 2
    assert pc.all(pc.equal(mc.column("kind"), CopyKind.DTOH.value)).as_py()
    assert mc.column("stream").to_pylist() == [14, 18]
    assert t["memset"].num_rows == 1
