"""How a process's capture window came about, in words: its settings' ``window`` and
``window_kind`` (``capture.auto_window`` decides; docs/record.md lists the texts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WindowUsed:
    """The window a process ended up with, for its settings and diagnostics."""

    kind: str  # steps | time (--delay/--duration) | gpu_time | gpu_warmup | tail
    text: str


def describe_auto(warmup_s: float, max_s: float) -> WindowUsed:
    return WindowUsed("gpu_time", f"no step hook fired: {max_s:g} s from {warmup_s:g} s after "
                                  "the GPU was first used (steps recovered at analysis)")


def describe_auto_compiled(warmup_s: float, max_s: float, compiled_s: float) -> WindowUsed:
    return WindowUsed("gpu_time", f"no step hook fired: {max_s:g} s from {warmup_s:g} s after the "
                                  f"last compilation ({compiled_s:.3g} s after the GPU was first "
                                  "used; steps recovered at analysis)")


def describe_auto_flow(warmup_s: float, max_s: float, flow_s: float) -> WindowUsed:
    return WindowUsed("gpu_time", f"no step hook fired: {max_s:g} s from {warmup_s:g} s after the "
                                  f"GPU's work started to flow ({flow_s:.3g} s after the GPU was "
                                  "first used; steps recovered at analysis)")


def describe_auto_quiet(wait_s: float, max_s: float) -> WindowUsed:
    return WindowUsed("gpu_time", f"no step hook fired and the GPU ran almost no kernels within "
                                  f"{wait_s:g} s of its first use (NVML utilisation): {max_s:g} s "
                                  "from then (steps recovered at analysis)")


def describe_auto_expected(wait_s: float, max_s: float) -> WindowUsed:
    return WindowUsed("gpu_time", f"an optimizer was built but no step hook fired within {wait_s:g} s "
                                  f"of the first GPU use: {max_s:g} s from then (steps recovered "
                                  "at analysis)")


def describe_warmup_end(warmup_s: float, ran_s: float) -> WindowUsed:
    return WindowUsed("gpu_warmup", f"no step hook fired and the program ended {ran_s:.3g} s "
                                    f"after it first used the GPU, within the {warmup_s:g} s "
                                    "warm-up: from the first GPU use to the end (warm-up included)")


def describe_tail(keep_s: float, gpu: bool) -> WindowUsed:
    what = "host and GPU activity" if gpu else "host activity"
    return WindowUsed("tail", f"the window never opened: the last {keep_s:g} s of {what}")
