"""Arrow tables to the data frames users have: pandas and polars are optional extras
(``pip install 'stepscope[pandas]'`` / ``'stepscope[polars]'``), never required; without
them, a one-line message says what to install."""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa

from stepscope.errors import StepscopeError

KINDS = ("arrow", "pandas", "polars")


def convert(table: pa.Table, to: str) -> Any:
    """``table`` as ``to`` (arrow: itself; pandas: a DataFrame; polars: a DataFrame)."""
    if to == "arrow":
        return table
    if to not in KINDS:
        raise StepscopeError(f"unknown table kind {to!r} (one of {', '.join(KINDS)})")
    try:
        module = importlib.import_module(to)
    except ImportError:
        raise StepscopeError(f"{to} is not installed: pip install 'stepscope[{to}]' (or use "
                             "the Arrow table this returns without to=...)") from None
    if to == "pandas":
        return table.to_pandas()
    return module.from_arrow(table)
