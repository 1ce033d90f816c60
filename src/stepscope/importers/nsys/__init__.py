"""Nsight Systems exports (``nsys export --type sqlite``, plain or gzipped, and the Parquet
folder of ``--type parquetdir``): ``read_nsys`` reads one as rank bundles, one per process
that drove a GPU. ``source`` opens the export, ``layout`` tells its version's codes and names
apart by the tables and columns present, ``gpu``/``host``/``devices`` build the tables."""

from stepscope.importers.nsys.read import read_nsys, read_nsys_ranks, read_one
from stepscope.importers.nsys.source import SQLITE_MAGIC, is_parquet_export

__all__ = ["SQLITE_MAGIC", "is_parquet_export", "read_nsys", "read_nsys_ranks", "read_one"]
