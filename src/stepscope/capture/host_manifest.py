"""What a process's host capture says in the manifest (``settings.host``): its DataLoaders, CPU
affinity against the GPUs' NUMA nodes, and the state of its samplers and hooks
(``HostCapture.settings_for_manifest``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from stepscope.capture.samplers.numa import numa_node_cpus


def manifest_settings(*, loaders: list[dict[str, Any]], nvml: Mapping[str, Any],
                      metrics: Mapping[str, Any], stacks: Mapping[str, Any],
                      psutil_unavailable: Mapping[str, str], hooks: dict[str, Any] | str,
                      steps: dict[str, Any], sys_root: str) -> dict[str, Any]:
    """``nvml``: the samplers' NVML facts (GPU indices are str keys when they came through
    JSON); ``metrics``/``stacks``: the samplers' status; ``hooks``: the hooks installed, or
    "off"; ``steps``: the step boundaries' manifest."""
    out: dict[str, Any] = {}
    if loaders:
        out["dataloader"] = max(loaders, key=lambda r: r["batches"])
        out["dataloaders"] = loaders
    affinity: list[int] | None = None
    if hasattr(os, "sched_getaffinity"):
        affinity = sorted(os.sched_getaffinity(0))
        out["cpu_affinity"] = affinity
    numa: dict[str, int | None] = {str(i): n for i, n in nvml.get("numa_nodes", {}).items()}
    if numa:
        out["gpu_numa_node"] = numa
        on_node: dict[str, bool] = {}
        for i, node in numa.items():
            cpus = numa_node_cpus(node, sys_root) if node is not None else None
            if cpus and affinity is not None:
                on_node[i] = set(affinity) <= set(cpus)
        if on_node:
            out["cpu_affinity_within_gpu_numa_node"] = on_node
    m = dict(metrics)
    if nvml:
        m["gpus"] = {str(i): name for i, name in nvml["names"].items()}
        m["gpm"] = {str(i): ok for i, ok in nvml["gpm"].items()}
        m["unavailable"] = dict(nvml["unavailable"])
    if psutil_unavailable:
        m.setdefault("unavailable", {}).update(psutil_unavailable)
    out["samplers"] = {"metrics": m, "stacks": dict(stacks), "hooks": hooks, "steps": steps}
    return out


__all__ = ["manifest_settings"]
