"""The bandwidth a run's collectives can expect on one machine: the GPUs' NVLink (or PCIe)
bandwidth per direction, measured by the capture (``devices.nvlink_gbs``/``pcie_gbs``, from
NVML) or, for imported traces, taken from the GPU model's public datasheet.

What NCCL reaches is below the link: nccl-tests' all-reduce bus bandwidth of 1 GiB measured
329 GB/s on 2 x H100 SXM and 355 GB/s on 4 (NVLink 4, 450 GB/s per direction, NVLink
SHARP off; docs/accuracy.md), 0.73-0.79 of the link: ``REACHABLE`` is 0.7 of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REACHABLE = 0.7

# NVLink bandwidth per direction, whole GPU, GB/s: half the bidirectional figure of NVIDIA's
# (AMD's) datasheets. Matched on the device name, first hit wins.
DATASHEET_GBS: tuple[tuple[str, float], ...] = (
    ("B200", 900.0),  # NVLink 5: 1.8 TB/s
    ("B100", 900.0),
    ("H200", 450.0),  # NVLink 4: 900 GB/s
    ("H100 80GB HBM3", 450.0),  # H100 SXM5
    ("H100 SXM", 450.0),
    ("H800", 200.0),  # NVLink 400 GB/s
    ("A100-SXM", 300.0),  # NVLink 3: 600 GB/s
    ("A100-PG509", 300.0),  # the SXM4 board
    ("A800", 200.0),
    ("V100-SXM2", 150.0),  # NVLink 2: 300 GB/s
    ("MI300X", 448.0),  # 7 Infinity Fabric links x 128 GB/s bidirectional
)


@dataclass(frozen=True)
class Link:
    gbs: float  # per direction
    kind: str  # "NVLink" | "PCIe"
    measured: bool  # from the capture (NVML); False: the datasheet
    device: str

    @property
    def reachable_gbs(self) -> float:
        return REACHABLE * self.gbs

    def describe(self) -> str:
        how = "measured by NVML" if self.measured else "the GPU's datasheet"
        return f"{self.kind} {self.gbs:.0f} GB/s per direction ({how}, {self.device})"


def link_of(devices: Sequence[Mapping[str, Any]]) -> Link | None:
    """The slowest link among ``devices`` rows (one rank's or a run's); None when unknown."""
    links: list[Link] = []
    for d in devices:
        name = str(d.get("name") or "")
        nv, pcie = d.get("nvlink_gbs"), d.get("pcie_gbs")
        if nv:
            links.append(Link(float(nv), "NVLink", True, name))
        elif d.get("nvlink_links") == 0 and pcie:
            links.append(Link(float(pcie), "PCIe", True, name))
        else:
            sheet = next((g for key, g in DATASHEET_GBS if key in name), None)
            if sheet is not None:
                links.append(Link(sheet, "NVLink", False, name))
    return min(links, key=lambda x: x.gbs) if links else None


__all__ = ["DATASHEET_GBS", "REACHABLE", "Link", "link_of"]
