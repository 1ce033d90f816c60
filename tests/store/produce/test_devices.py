"""The devices rows' one home: a GPU's properties -> its row, and which source's row a used GPU
keeps."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from stepscope.store.produce.devices import (
    DeviceProperties,
    choose,
    device_columns,
    device_row,
    record_devices,
)

H100 = DeviceProperties(device=1, name="NVIDIA H100 80GB HBM3", sm_count=132,
                        memory_clock_khz=2_619_000, bus_width_bits=5120)


def test_a_row_has_the_vendor_and_the_peak_bandwidth() -> None:
    row = device_row(H100)
    assert (row["device"], row["vendor"], row["sm_count"]) == (1, "nvidia", 132)
    assert row["memory_bandwidth_gbs"] == pytest.approx(3352.32)
    assert device_row(DeviceProperties(device=0, warp_size=64), vendor="amd")["vendor"] == "amd"
    assert device_row(DeviceProperties(device=0))["memory_bandwidth_gbs"] is None


def test_the_first_sources_rows_win_and_unused_gpus_go() -> None:
    trace = pa.table({"device": [0, 1, 2], "name": ["k0", "k1", "k2"]})
    got = choose({1: device_row(H100)}, trace, used=[1, 2])
    assert got is not None
    assert got["device"] == [1, 2] and got["name"] == ["NVIDIA H100 80GB HBM3", "k2"]
    assert got["sm_count"] == [132, None]
    assert choose({}, {"device": [0], "name": ["k0"]}, used=[3]) is None
    assert device_columns([]) is None


def test_record_devices_of_lists_arrays_and_arrow() -> None:
    tables = {"kernels": {"device": np.array([2, 2, 0])}, "memcpy": pa.table({"device": [None, 5]}),
              "sync": {"device": [-1, 4]}, "threads": {"device": [9]}}
    assert record_devices(tables) == {0, 2, 4, 5}
