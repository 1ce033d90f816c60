"""How far a figure can be trusted: the confidence of host-side timings and of findings."""

from __future__ import annotations

from enum import Enum


class Confidence(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
