"""The torch-free half of the scenario harness: the scenario vocabulary (``SkipScenario``,
``Step``) and baseline/fixed timing interleaved in one process.

``common.py`` (torch) re-exports all of it; JAX and CuPy scenarios import this module only, so
their timing child and their ``program.py`` never load torch (a second CUDA runtime, cuDNN and
allocator in the process would not be the program a user runs).

A step that is not a torch step gives its own block-boundary synchronisation as ``Step.sync``
(JAX: ``block_until_ready`` on the step's latest output; CuPy: a stream or device
synchronize); it is called only at block boundaries, never inside a block.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Protocol, TypeVar

# The registry: every scenario module, in report order.
# JSON {calibration key: n} in a scenario program's environment: ``common.calibrate`` uses these
# instead of measuring (record_suite hands the timing child's to the recorded program)
CALIBRATIONS_ENV = "SCENARIO_CALIBRATIONS"

SCENARIOS: tuple[str, ...] = (
    "healthy", "dataloader_bound", "host_python", "item_every_step", "explicit_sync",
    "launch_bound", "pageable_copies", "cpu_ops_midstep", "small_grid", "low_occupancy",
    "fp32_no_tf32", "fp16_misaligned", "copy_serialized", "alloc_churn",
    # one per framework path (issue 17): no torch.optim, Triton, JAX eager / jit, CuPy, inference
    "torch_manual_sgd", "triton_small_grid", "jax_eager", "jax_jit", "cupy_pageable",
    "torch_inference",
    # JAX users' own problems (issue 23): a host callback in the step, the input pipeline inline
    "jax_host_callback", "jax_input_host",
    # remedy validation (issue 22): an fp32 conv net with three precision fixes, the sync trap
    "conv_fp32", "item_trap", "deep_mlp_fp32", "mlp_nobias_fp32",
    # the plan of two remedies (issue 22): two planted problems, each fix alone and both
    "graphs_pageable", "loader_tf32", "sync_tf32",
)

# Scenarios the interleaved harness cannot time: an in-process loader (num_workers=0) timed
# beside another variant's live worker processes, and a fixed variant whose persistent workers
# fill their prefetch queue while the other variants' blocks run. The harness timed
# dataloader_bound's baseline at a median 91 ms where its program alone ran at 16-22 ms, and
# loader_tf32's fixed step at 2.7-3.6 ms where its program alone ran at 4.4-4.7 ms and its loader
# alone cannot deliver faster than ~4.4 ms (docs/accuracy.md, "The loader's hand-over").
# record_suite.py times their variants by their own programs unless told otherwise.
TIMED_BY_PROGRAMS = ("dataloader_bound", "loader_tf32")

# program.py's default length (see scenario_meta): a step-hook program runs the record window's
# 3 warm-up steps + its 50 steps + ~10 steps after it; a program without a step hook gets
# record's time window (GPU seen in use -> 3 s warm-up -> 10 s), so it runs 14 s from its
# first step.
HOOK_PROGRAM_STEPS = 66
TIMED_PROGRAM_SECONDS = 14.0
TABLES = {"torch": "PyTorch", "jax": "JAX", "cupy": "CuPy/Triton"}


@dataclass(frozen=True)
class ScenarioMeta:
    """What a scenario module declares beside ``EXPECTED``/``DESCRIPTION``/``build``:

    ``FRAMEWORK``: "torch" (default), "jax" or "cupy". Only torch scenarios are traced with
    torch.profiler; the others import this module, never torch.
    ``STEP_HOOK``: the step calls a ``torch.optim`` optimizer, so ``stepscope record``'s step
    hook fires (default: True for torch, False otherwise).
    ``TABLE``: the accuracy table it is reported in (default from FRAMEWORK).
    ``PROGRAM_STEPS`` / ``PROGRAM_SECONDS``: program.py's default length, overriding the above.
    """

    name: str
    expected: str
    description: str
    framework: str
    step_hook: bool
    table: str
    program_steps: int | None  # set for step-hook programs
    program_seconds: float | None  # set for the others

    @staticmethod
    def of(mod: ModuleType) -> ScenarioMeta:
        fw = str(getattr(mod, "FRAMEWORK", "torch"))
        hook = bool(getattr(mod, "STEP_HOOK", fw == "torch"))
        return ScenarioMeta(
            name=mod.__name__.rsplit(".", 1)[-1], expected=str(getattr(mod, "EXPECTED", "")),
            description=str(getattr(mod, "DESCRIPTION", "")), framework=fw, step_hook=hook,
            table=str(getattr(mod, "TABLE", TABLES.get(fw, fw))),
            program_steps=int(getattr(mod, "PROGRAM_STEPS", HOOK_PROGRAM_STEPS)) if hook else None,
            program_seconds=None if hook else float(getattr(mod, "PROGRAM_SECONDS",
                                                            TIMED_PROGRAM_SECONDS)))


class SkipScenario(Exception):
    """The scenario cannot run on this device / software (message says why)."""


class Step:
    """One step of a scenario. ``close()`` frees what ``build`` made (loader workers...).

    ``sync``: for steps that do not run on torch's CUDA streams, what waits for all the work the
    step has queued (None: torch's ``torch.cuda.synchronize()`` does, see ``common.Runner``).
    """

    def __init__(self, fn: Callable[[], Any], *, close: Callable[[], None] | None = None,
                 info: dict[str, Any] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.fn = fn
        self._close = close
        self.info: dict[str, Any] = dict(info or {})
        self.sync = sync

    def __call__(self) -> None:
        self.fn()

    def close(self) -> None:
        c, self._close = self._close, None
        if c is not None:
            c()


def as_step(obj: Step | Callable[[], Any]) -> Step:
    return obj if isinstance(obj, Step) else Step(obj)


class StepRunner(Protocol):
    """Runs one step per call; ``sync()`` waits for everything queued so far."""

    def __call__(self) -> None: ...

    def sync(self) -> None: ...


class PlainRunner:
    """A step with its own ``sync`` (JAX, CuPy) or none (CPU): no in-flight bound."""

    def __init__(self, step: Step) -> None:
        self.step = step

    def __call__(self) -> None:
        self.step()

    def sync(self) -> None:
        if self.step.sync is not None:
            self.step.sync()


@dataclass
class Timing:
    rounds: int
    steps_per_block: int
    warmup_steps: int
    baseline_blocks_ms: list[float] = field(default_factory=list)  # per-block mean step time
    fixed_blocks_ms: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # "BF" or "FB" per round
    wall_s: float = 0.0

    @property
    def baseline_ms(self) -> float:
        return statistics.median(self.baseline_blocks_ms)

    @property
    def fixed_ms(self) -> float:
        return statistics.median(self.fixed_blocks_ms)

    @property
    def saving_ms(self) -> float:
        return self.baseline_ms - self.fixed_ms

    @property
    def saving_pct(self) -> float:
        return 100.0 * self.saving_ms / self.baseline_ms if self.baseline_ms > 0 else 0.0

    @property
    def paired_saving_ms(self) -> float:
        """Median over rounds of (baseline block - fixed block): robust to slow drift."""
        return statistics.median(b - f for b, f in zip(self.baseline_blocks_ms,
                                                       self.fixed_blocks_ms))

    def spread_pct(self, which: str) -> float:
        """(max - min) / median of the block means, in %."""
        xs = self.baseline_blocks_ms if which == "baseline" else self.fixed_blocks_ms
        med = statistics.median(xs)
        return 100.0 * (max(xs) - min(xs)) / med if med > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(baseline_ms=round(self.baseline_ms, 4), fixed_ms=round(self.fixed_ms, 4),
                 saving_ms=round(self.saving_ms, 4), saving_pct=round(self.saving_pct, 2),
                 paired_saving_ms=round(self.paired_saving_ms, 4),
                 baseline_spread_pct=round(self.spread_pct("baseline"), 2),
                 fixed_spread_pct=round(self.spread_pct("fixed"), 2))
        d["baseline_blocks_ms"] = [round(x, 4) for x in self.baseline_blocks_ms]
        d["fixed_blocks_ms"] = [round(x, 4) for x in self.fixed_blocks_ms]
        return d


def block(runner: StepRunner, m: int) -> float:
    """Mean step time (ms) of ``m`` steps, synchronizing only at both ends."""
    runner.sync()
    t0 = time.perf_counter()
    for _ in range(m):
        runner()
    runner.sync()
    return (time.perf_counter() - t0) * 1e3 / m


def time_runners(rb: StepRunner, rf: StepRunner, *, rounds: int = 10, steps: int | None = None,
                 warmup: int = 5, block_ms: float = 150.0,
                 log: Callable[[str], None] = print) -> Timing:
    """Warm-up ``warmup`` steps each, then ``rounds`` x (M baseline, M fixed), order alternating.

    M (``steps``) defaults to what makes a block of the slower variant last about ``block_ms``
    (3..50 steps), from a short probe after the warm-up.
    """
    mt = time_many({"baseline": rb, "fixed": rf}, rounds=rounds, steps=steps, warmup=warmup,
                   block_ms=block_ms, log=lambda _m: None)
    t = mt.pair("fixed")
    log(f"    timing: {rounds} rounds x {t.steps_per_block} steps: baseline {t.baseline_ms:.3f} "
        f"ms, fixed {t.fixed_ms:.3f} ms, saving {t.saving_ms:.3f} ms ({t.saving_pct:.1f}%)")
    return t


@dataclass
class MultiTiming:
    """The baseline and every fix variant timed interleaved: per-block mean step times of each
    (``blocks_ms[name]``, the baseline under "baseline") and the order of each round."""

    rounds: int
    steps_per_block: int
    warmup_steps: int
    blocks_ms: dict[str, list[float]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)
    wall_s: float = 0.0

    def median(self, name: str) -> float:
        return statistics.median(self.blocks_ms[name])

    def pair(self, name: str, base: str = "baseline") -> Timing:
        """Baseline vs one variant, as the two-variant ``Timing`` (order "BF" when the baseline
        ran first in the round)."""
        order = ["BF" if o.index(base) < o.index(name) else "FB" for o in self.order]
        return Timing(rounds=self.rounds, steps_per_block=self.steps_per_block,
                      warmup_steps=self.warmup_steps,
                      baseline_blocks_ms=list(self.blocks_ms[base]),
                      fixed_blocks_ms=list(self.blocks_ms[name]), order=order,
                      wall_s=self.wall_s)

    def variant_dict(self, name: str) -> dict[str, Any]:
        """One variant's measurement against the baseline (what results.json keeps)."""
        t = self.pair(name)
        return {"fixed_ms": round(t.fixed_ms, 4), "saving_ms": round(t.saving_ms, 4),
                "saving_pct": round(t.saving_pct, 2),
                "paired_saving_ms": round(t.paired_saving_ms, 4),
                "spread_pct": round(t.spread_pct("fixed"), 2),
                "blocks_ms": [round(x, 4) for x in t.fixed_blocks_ms]}

    def to_dict(self) -> dict[str, Any]:
        base = self.pair(next(n for n in self.blocks_ms if n != "baseline")) \
            if len(self.blocks_ms) > 1 else None
        return {"rounds": self.rounds, "steps_per_block": self.steps_per_block,
                "warmup_steps": self.warmup_steps, "wall_s": self.wall_s,
                "order": ["".join("B" if n == "baseline" else "V" for n in o)
                          for o in self.order],
                "baseline_ms": round(self.median("baseline"), 4),
                "baseline_spread_pct": round(base.spread_pct("baseline"), 2) if base else None,
                "baseline_blocks_ms": [round(x, 4) for x in self.blocks_ms["baseline"]]}


T = TypeVar("T")


def round_order(names: Sequence[T], i: int) -> list[T]:
    """Round ``i``'s order: the list as given on even rounds, reversed on odd ones (ABBA for
    two; every variant's mean position is the same over an even number of rounds)."""
    return list(names) if i % 2 == 0 else list(reversed(names))


def unknown_names(prog: str, names: Sequence[str]) -> bool:
    """Whether ``names`` holds a name that is no scenario (said on stderr as ``prog: ...``)."""
    import sys

    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        print(f"{prog}: unknown scenario {', '.join(map(repr, bad))}", file=sys.stderr)
    return bool(bad)


def each_torch(prog: str, names: Sequence[str], fn: Callable[[str], T]
               ) -> Iterator[tuple[str, T]]:
    """``fn(name)`` for each torch scenario of ``names``, in order; one of another framework,
    or one that cannot run here (``SkipScenario``), is said on stderr and left out."""
    import importlib
    import sys

    for name in names:
        if ScenarioMeta.of(importlib.import_module(name)).framework != "torch":
            print(f"{prog}: {name} is not a torch scenario", file=sys.stderr)
            continue
        try:
            got = fn(name)
        except SkipScenario as exc:
            print(f"{prog}: {name}: cannot run here: {exc}", file=sys.stderr)
            continue
        yield name, got


def steps_per_block(probe_ms: float, block_ms: float = 150.0) -> int:
    """Steps that make a block last about ``block_ms``, from a probe's step time (3..50)."""
    return int(min(50, max(3, round(block_ms / max(probe_ms, 1e-3)))))


def time_many(runners: dict[str, StepRunner], *, rounds: int = 10, steps: int | None = None,
              warmup: int = 5, block_ms: float = 150.0,
              log: Callable[[str], None] = print) -> MultiTiming:
    """The baseline ("baseline", first) and every variant timed interleaved: warm-up, then
    ``rounds`` x (M steps of each), the order reversed every other round (``round_order``).
    M defaults to what makes a block of the slowest variant last about ``block_ms``."""
    t_start = time.perf_counter()
    names = list(runners)
    for r in runners.values():
        block(r, warmup)
    if steps is None:
        steps = steps_per_block(max(block(r, 2) for r in runners.values()), block_ms)
    mt = MultiTiming(rounds=rounds, steps_per_block=steps, warmup_steps=warmup,
                     blocks_ms={n: [] for n in names})
    for i in range(rounds):
        order = round_order(names, i)
        for n in order:
            mt.blocks_ms[n].append(block(runners[n], steps))
        mt.order.append(order)
    mt.wall_s = round(time.perf_counter() - t_start, 3)
    log(f"    timing: {rounds} rounds x {steps} steps: " + ", ".join(
        f"{n} {mt.median(n):.3f} ms" for n in names))
    return mt


def time_plain(baseline: Step, fixed: Step, **kw: Any) -> Timing:
    """``time_runners`` for steps that synchronise themselves (``Step.sync``)."""
    return time_runners(PlainRunner(baseline), PlainRunner(fixed), **kw)


# ---------------------------------------------------------------------------------------------
# Scoring one scenario


def score(expected: str, timing: dict[str, Any] | None, advice: dict[str, Any] | None,
          tolerance: float = 0.30) -> dict[str, Any]:
    """Compare the advisor's estimate for ``expected`` with the measured saving."""
    out: dict[str, Any] = {"expected": expected}
    findings = (advice or {}).get("findings", [])
    out["top"] = findings[0]["id"] if findings else None
    out["warn_crit"] = sum(1 for f in findings if f["severity"] in ("warning", "critical"))
    if not expected:  # healthy
        out["passed"] = advice is not None and out["warn_crit"] == 0
        return out
    rank = next((i + 1 for i, f in enumerate(findings) if f["id"] == expected), None)
    out["expected_rank"] = rank
    out["ranked_first"] = rank == 1
    f = findings[rank - 1] if rank else None
    out["est_saving_ms"] = f["est_saving_ms"] if f else None
    out["est_saving_pct"] = f["est_saving_pct"] if f else None
    if timing and f:
        m_ms, m_pct = timing["saving_ms"], timing["saving_pct"]
        out["ratio_ms"] = round(f["est_saving_ms"] / m_ms, 3) if m_ms > 0 else None
        out["ratio_pct"] = round(f["est_saving_pct"] / m_pct, 3) if m_pct > 0 else None
        r = out["ratio_pct"]
        out["within_tolerance"] = r is not None and abs(r - 1.0) <= tolerance
    else:
        out["ratio_ms"] = out["ratio_pct"] = None
        out["within_tolerance"] = False
    out["passed"] = bool(out["ranked_first"])
    return out


def score_first_serious(expected: str, timing: dict[str, Any] | None,
                        findings: list[dict[str, Any]] | None,
                        tolerance: float = 0.30) -> dict[str, Any]:
    """record_suite's score, the same for the record and the torch.profiler path.

    Ranked first: the first warning/critical finding (findings come ranked) is the planted rule.
    Estimate: the planted rule's ``est_saving_pct`` (its share of the captured step, whatever its
    rank or severity) over the measured saving as a share of the untraced baseline step; within
    tolerance when ``|ratio - 1| <= tolerance``. Healthy (``expected == ""``): passed when no
    finding is warning/critical. ``findings=None``: the path gave no report (passed False).
    """
    out: dict[str, Any] = {"expected": expected, "has_report": findings is not None}
    fs = findings or []
    serious = [f for f in fs if f.get("severity") in ("warning", "critical")]
    out["top"] = serious[0]["id"] if serious else None
    out["top_severity"] = serious[0]["severity"] if serious else None
    out["warn_crit"] = len(serious)
    out["findings"] = len(fs)
    if not expected:
        out["passed"] = findings is not None and not serious
        return out
    rank = next((i + 1 for i, f in enumerate(fs) if f["id"] == expected), None)
    f = fs[rank - 1] if rank else None
    out["expected_rank"] = rank
    out["expected_severity"] = f["severity"] if f else None
    out["ranked_first"] = bool(serious) and serious[0]["id"] == expected
    out["est_saving_ms"] = f.get("est_saving_ms") if f else None
    out["est_saving_pct"] = f.get("est_saving_pct") if f else None
    out["ratio_pct"] = out["ratio_ms"] = None
    if timing and f and f.get("est_saving_pct") is not None:
        m_ms, m_pct = timing["saving_ms"], timing["saving_pct"]
        out["ratio_ms"] = round(f["est_saving_ms"] / m_ms, 3) if m_ms > 0 else None
        out["ratio_pct"] = round(f["est_saving_pct"] / m_pct, 3) if m_pct > 0 else None
    r = out["ratio_pct"]
    out["within_tolerance"] = r is not None and abs(r - 1.0) <= tolerance
    out["passed"] = bool(out["ranked_first"] and out["within_tolerance"])
    return out
