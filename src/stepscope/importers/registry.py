"""The formats stepscope imports: format name -> how to read one file of it as a rank bundle.

``detect.detect(path)`` (the one place that tells formats apart, by content) names the format;
``FORMATS[name].read`` reads the file. One folder per format (``kineto/`` today; XSpace, Nsight
Systems and Nsight Compute next): a new format adds its folder, a ``Format`` here and its
signature in ``detect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from stepscope.importers.detect import detect
from stepscope.importers.kineto.parse import parse_kineto
from stepscope.importers.nsys import read_nsys_ranks, read_one
from stepscope.importers.xspace.parse import parse_xspace
from stepscope.schema_enums import SourceKind
from stepscope.store.produce import RankBundle, TraceReader

# one file -> several ranks' bundles, numbered from ``first_rank`` (an Nsight Systems report
# holds every process of a job)
RanksReader = Callable[..., Iterator[RankBundle]]


@dataclass(frozen=True)
class Format:
    name: str  # what ``detect`` answers
    kind: SourceKind  # the kind of source its bundles are (``schema.CONTRACTS``)
    read: TraceReader  # one file -> one rank's bundle
    doc: str
    ranks: RanksReader | None = None  # set for formats whose one file holds several ranks


FORMATS: Mapping[str, Format] = MappingProxyType({f.name: f for f in (
    Format("kineto", SourceKind.KINETO, parse_kineto,
           "PyTorch profiler (Kineto) Chrome trace, .json or .json.gz, one file per rank"),
    Format("xspace", SourceKind.XSPACE, parse_xspace,
           "TensorFlow/JAX profiler XSpace, .xplane.pb or .xplane.pb.gz, one file per host"),
    Format("nsys", SourceKind.NSYS, read_one,
           "Nsight Systems export: SQLite (.sqlite, .sqlite.gz) or Parquet folder; one rank "
           "per process that drove a GPU", ranks=read_nsys_ranks),
)})


def format_of(path: str | Path) -> Format:
    """The format of the file at ``path`` (``detect``; raises ``TraceFormatError``)."""
    return FORMATS[detect(path)]


__all__ = ["FORMATS", "Format", "format_of"]
