from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # tests/builder.py importable as `builder`

FIXTURES = HERE.parent.parent / "shared" / "fixtures"
DATA = HERE / "data"


@pytest.fixture
def builder():  # type: ignore[no-untyped-def]
    from builder import TraceBuilder

    return TraceBuilder()
