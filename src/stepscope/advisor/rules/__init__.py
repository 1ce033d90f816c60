"""The rule catalogue. One module per rule; module name == rule id == docs/rules/<id>.md.

Each module defines ``RULE``, an object satisfying ``advisor.base.Rule``.
"""

from __future__ import annotations

import importlib

from stepscope.advisor.base import Rule

RULE_IDS: tuple[str, ...] = (
    "input_bound", "host_bound", "step_gaps", "launch_bound", "sync_calls",
    "pageable_memcpy", "excess_transfers", "no_copy_overlap", "exposed_communication",
    "straggler", "slow_collectives", "numa_affinity",
    "small_grid", "low_occupancy", "no_tensor_cores", "tc_misaligned",
    "memory_pressure", "memory_underused", "unstable_steps",
    # Nsight Compute counters (kernel_metrics): inside the kernel
    "kernel_narrow_loads", "kernel_uncoalesced", "kernel_bank_conflicts", "kernel_occupancy",
    "kernel_tail", "kernel_no_tensor_cores", "kernel_memory_bound", "kernel_stalls",
)


def _load() -> tuple[Rule, ...]:
    rules = []
    for rid in RULE_IDS:
        mod = importlib.import_module(f"stepscope.advisor.rules.{rid}")
        rule = mod.RULE
        assert rule.id == rid, f"{rid}.RULE has id {rule.id}"
        rules.append(rule)
    return tuple(rules)


RULES: tuple[Rule, ...] = _load()
