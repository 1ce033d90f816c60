"""One run = a folder with ``manifest.json`` and one Parquet file per table per rank."""

from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo
from stepscope.store.run import Run, open_run
from stepscope.store.writer import RunWriter

__all__ = ["Diagnostic", "Manifest", "RankInfo", "Run", "RunWriter", "SourceInfo", "open_run"]
