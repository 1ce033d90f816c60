"""stepscope: why is my GPU training step slow, and what should I change?"""

from __future__ import annotations

__version__ = "0.1.0"
