"""Mutated XSpace profiles (tests/data/xspace) through ``stepscope import`` and ``report``:
truncation, byte flips, and planted values out of range (times, ids, sizes), under the contract
of ``fuzz.contract``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.contract import FUZZ, Outcome, check, fresh, report_json
from importers.xspace.make import Plane, write

DATA = Path(__file__).parent.parent / "data" / "xspace"
RAW = (DATA / "jax_mlp.xplane.pb").read_bytes()


def imported(root: Path, trace: Path) -> Outcome:
    def ok(res: Outcome) -> None:
        assert report_json(root / "run")["schema"] == "stepscope.report/1"
    return check(root, ["import", str(trace), "-o", str(root / "run")], "run", ok)


@FUZZ
@given(cut=st.floats(0.0, 1.0, exclude_max=True), gz=st.booleans())
def test_truncated(tmp_path: Path, cut: float, gz: bool) -> None:
    root = fresh(tmp_path)
    data = gzip.compress(RAW) if gz else RAW
    trace = root / ("t.xplane.pb.gz" if gz else "t.xplane.pb")
    trace.write_bytes(data[: int(len(data) * cut)])
    res = imported(root, trace)
    if cut < 0.98:  # a profile cut short is never imported as if whole
        assert res.code == 2


@FUZZ
@given(gz=st.booleans(),
       flips=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=8))
def test_byte_flips(tmp_path: Path, gz: bool, flips: list[tuple[float, int]]) -> None:
    root = fresh(tmp_path)
    data = bytearray(gzip.compress(RAW) if gz else RAW)
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    trace = root / ("t.xplane.pb.gz" if gz else "t.xplane.pb")
    trace.write_bytes(bytes(data))
    imported(root, trace)


@pytest.mark.parametrize("field, value", [
    ("line_ns", 2**62), ("line_ns", -(2**62)), ("offset", 2**63 - 1), ("offset", -(2**63)),
    ("dur", 2**63 - 1), ("dur", -5_000_000), ("start", 2**63 - 1), ("start", -1),
    ("correlation", 2**63 - 1), ("grid", 2**40), ("size", -1), ("step", 2**63 - 1),
])
def test_values_out_of_range(tmp_path: Path, field: str, value: int) -> None:
    host = Plane("/host:CPU")
    host.line(1, "python3", value if field == "line_ns" else 0).event(
        "train", 0, 10_000_000, step_num=value if field == "step" else 0)
    gpu = Plane("/device:GPU:0", {"core_count": 80})
    s = gpu.line(7, "Stream #7(Compute)", value if field == "line_ns" else 0)
    s.event("k", value if field == "offset" else 1_000_000,
            value if field == "dur" else 1_000_000,
            correlation_id=value if field == "correlation" else 1,
            kernel_details=f"grid:{value if field == 'grid' else 4},1,1 block:32,1,1")
    s.event("MemcpyH2D", 3_000_000, 1_000_000,
            memcpy_details=f"size:{value if field == 'size' else 64} dest:0")
    planes = [host, gpu]
    if field == "start":
        planes.append(Plane("Task Environment", {"profile_start_time": value}))
    root = fresh(tmp_path)
    res = imported(root, write(root / "t.xplane.pb", planes))
    if field == "start":  # the clock every row depends on: refused, never shifted wrongly
        assert res.code == 2 and "profile_start_time" in res.err
        return
    assert res.code == 0
    doc = json.loads((root / "run" / "manifest.json").read_text())
    codes = {d["code"] for d in doc["diagnostics"]}
    if field == "dur":  # the kernel left out and said so (a negative one too)
        assert "duration_out_of_range" in codes and doc["tables"]["kernels"] == 0
    if field == "line_ns":  # (an offset of 2^63 ps is 107 days: a real time)
        assert "time_out_of_range" in codes
