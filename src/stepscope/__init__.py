"""stepscope: why is my GPU training step slow, and what should I change?"""

from __future__ import annotations

__version__ = "0.1.0"

from stepscope.api import Recording, record, step  # noqa: E402  (after __version__: cli reads it)

__all__ = ["Recording", "__version__", "record", "step"]
