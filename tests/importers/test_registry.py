"""Importers as a registry: ``detect`` names the format, the registry reads it as a bundle."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.errors import TraceFormatError
from stepscope.importers import FORMATS, detect, format_of
from stepscope.schema import CONTRACTS
from stepscope.schema_enums import SourceKind

DATA = Path(__file__).parent.parent / "data"


def test_every_detected_format_is_registered_with_a_contract() -> None:
    assert set(FORMATS) == {"kineto", "xspace", "nsys"}
    for name, fmt in FORMATS.items():
        assert fmt.name == name and fmt.kind in CONTRACTS


def test_a_kineto_trace_is_read_as_a_kineto_bundle() -> None:
    path = DATA / "cnn_fp32_sync.pt.trace.json.gz"
    assert detect(path) == "kineto"
    fmt = format_of(path)
    bundle = fmt.read(path, default_rank=3)
    assert bundle.kind is SourceKind.KINETO is fmt.kind
    assert bundle.rank.file == str(path) and bundle.tables["kernels"].num_rows > 0


def test_a_jax_trace_is_no_registered_format() -> None:
    with pytest.raises(TraceFormatError, match=r"import the profile it was made from instead: the \.xplane\.pb"):
        format_of(DATA / "jax_mlp.trace.json.gz")
