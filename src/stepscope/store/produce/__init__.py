"""What producers share on their way into the store: the rank bundle (the one contract), the
one run assembler, the ``devices`` rows and range nesting."""

from stepscope.store.produce.assemble import ManifestHead, TableObserver, assemble
from stepscope.store.produce.bundle import RankBundle, TraceReader

__all__ = ["ManifestHead", "RankBundle", "TableObserver", "TraceReader", "assemble"]
