"""Hand-written Nsight Compute raw-page exports for tests (the shape of ncu 2025.3's
``--csv --page raw``: header names, a units row, one row per launch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

IDENT = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
         "Block Size", "Grid Size", "Device", "CC")


def raw_csv(launches: Sequence[Mapping[str, str]], units: Mapping[str, str],
            noise: str = "") -> str:
    """A raw page: each launch maps identity columns and metrics to their text; ``units``
    maps each metric to its unit; ``noise`` goes before the header (program output)."""
    metrics = list(units)
    head = [*IDENT, *metrics]

    def line(cells: Sequence[str]) -> str:
        return ",".join('"' + c.replace('"', '""') + '"' for c in cells)

    rows = [line(head), line([""] * len(IDENT) + [units[m] for m in metrics])]
    for i, la in enumerate(launches):
        base = {"ID": str(i), "Process ID": "4242", "Process Name": "python3",
                "Host Name": "gpu-host", "Context": "1", "Stream": "7", "Device": "0",
                "CC": "9.0", "Block Size": "(256, 1, 1)", "Grid Size": "(1024, 1, 1)"}
        cells = {**base, **la}
        rows.append(line([cells.get(h, "n/a") for h in head]))
    return noise + "\n".join(rows) + "\n"
