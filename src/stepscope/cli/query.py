"""``stepscope query RUN "SQL"``: SQL over the run's tables (DuckDB)."""

from __future__ import annotations

import argparse
import csv
import datetime
import decimal
import json
import sys
from typing import Any

from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "query")
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("sql")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--limit", type=int, default=100, help="rows shown in table format (0 = all)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise StepscopeError(f"--limit {args.limit}: give a number of rows >= 0 (0 = all)")
    from stepscope.reporters.json_report import jsonable
    from stepscope.store.run import Run

    result = Run(args.run_dir).query(args.sql)
    rows = result.to_pylist()
    if args.format == "json":
        print(json.dumps(jsonable(rows), indent=1, ensure_ascii=False, default=_json_value))
    elif args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(result.column_names)
        for r in rows:
            w.writerow([r[c] for c in result.column_names])
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        from stepscope.reporters.terminal import printable_renderable

        tab = Table(show_edge=False, box=None, header_style="bold")
        for c in result.column_names:
            tab.add_column(c, overflow="fold")
        shown = rows if args.limit == 0 else rows[: args.limit]
        for r in shown:
            tab.add_row(*(Text("" if r[c] is None else str(r[c])) for c in result.column_names))
        console = Console()
        console.print(printable_renderable(tab))
        if len(shown) < len(rows):
            console.print(f"({len(rows)} rows, {len(shown)} shown; --limit 0 shows all)")
    return 0


def _json_value(value: Any) -> Any:
    """What SQL gives and JSON has no type for: bytes (a BLOB) as hex, decimals as numbers,
    intervals as seconds, anything else (UUID, time of day ...) as its text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        from stepscope.reporters.json_report import jsonable

        return jsonable(float(value))
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)
