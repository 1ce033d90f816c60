"""The GPU capture backends' names (``capture.gpu`` says what each is).

A module of its own, importing nothing: ``stepscope record --help`` offers them without importing
the capture (which imports the store, numpy and pyarrow).
"""

from __future__ import annotations

BACKENDS = ("auto", "cupti", "cupti-python", "torch", "none")
