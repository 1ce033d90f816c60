"""The multi-GPU programs, what each plants and what stepscope should find (torch-free: the
driver, the scoring script and the JAX program import it, never torch).

A scenario runs as ``LAUNCH`` says: "torchrun" (``torchrun --standalone --nproc-per-node=N
PROGRAM``, one process per GPU) or "python" (one process driving every local GPU: JAX).
``expected``: the rule that must be the top warning/critical finding ("" = healthy: no
warning/critical straggler or communication finding); ``late_rank``: the rank a straggler
finding must name (None: none planted), ``cause`` what it must say makes that rank late.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# NVLink multicast off on the lent machines (KINDS.md): every program sets these with
# os.environ.setdefault before it imports torch or jax.
NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
JSON_KEY = "mgpu"  # the programs' result line: {"mgpu": 1, ...}
EXIT_SKIPPED = 3  # a program that cannot run here (no JAX, no FSDP2) says why and exits 3
HOOK_STEPS = 66  # torch programs under record: its 3 warm-up steps, 50-step window, ~10 after
TIMED_SECONDS = 14.0  # programs without a step hook: record's time window (3 s + 10 s) + 1 s


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str  # rule id ranked first; "" = healthy
    launch: str  # "torchrun" | "python"
    planted: str  # one line
    fix: str  # one line ("" = no fix: the fixed variant is an alternative setting)
    late_rank: int | None = None
    cause: str | None = None  # a word the straggler finding's title or evidence must hold
    # findings that must NOT be warning/critical on a healthy run (others may be)
    forbidden: tuple[str, ...] = ("straggler", "exposed_communication", "slow_collectives")

    @property
    def script(self) -> str:
        return f"{self.name}.py"

    @property
    def torch(self) -> bool:
        return self.launch == "torchrun"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("ddp_straggler", "straggler", "torchrun",
             "rank 1 does 25 ms of Python busy-loop host work before each step",
             "the extra host work removed", late_rank=1, cause="host"),
    Scenario("ddp_exposed_comm", "exposed_communication", "torchrun",
             "1.07 GB of fp32 gradients all-reduced as one bucket after the whole backward",
             "DDP's default buckets (all-reduces under the backward)"),
    Scenario("ddp_balanced", "", "torchrun",
             "nothing: bf16 MLP, compute-bound, all-reduce under the backward", ""),
    Scenario("ddp_extra_allreduce", "exposed_communication", "torchrun",
             "every step all-reduces a flat copy of all parameters and reads one with .item()",
             "the check removed"),
    Scenario("fsdp2", "", "torchrun",
             "nothing: FSDP2 transformer, default implicit prefetch",
             ""),
    Scenario("jax_psum", "exposed_communication", "python",
             "JAX shard_map: all gradients flattened and psum'ed in fp32 as one collective "
             "after the whole backward",
             "a psum per layer, in bf16"),
)
BY_NAME = {s.name: s for s in SCENARIOS}


def read_json_line(text: str) -> dict[str, Any] | None:
    """The last ``{"mgpu": 1, ...}`` line of a program's output (None if there is none)."""
    for ln in reversed(text.splitlines()):
        ln = ln.strip()
        if ln.startswith("{") and f'"{JSON_KEY}"' in ln:
            try:
                d = json.loads(ln)
            except ValueError:
                continue
            if isinstance(d, dict):
                return d
    return None
