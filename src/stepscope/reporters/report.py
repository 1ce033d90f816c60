"""The one object every reporter takes: a run, its analysis and its advice (and, for the HTML
page, its ``Page``); ``build_report`` builds it from the run.

How the program ended (``Ending``, from the manifest), said the same way by every reporter:

* the command's return code (``source.details["returncode"]``, recorded runs): ``0`` is
  clean; ``N > 0`` is "the program exited with status N" (a ``sys.exit(3)`` is not an
  unfinished program); ``-S`` is "the program was killed by SIG..."; none at all on a
  recorded run is "the program did not finish";
* each rank's own ending where it was not a clean exit (the merge's ``process_ended``
  diagnostics: ``signal: SIGKILL``, ``exception: RuntimeError``, ``exit status 3``,
  ``unknown``), unless it only repeats the return code;
* whether the capture was cut short (the reporters' PARTIAL): the capture decides that itself
  (``capture/endings.py``): ``Manifest.partial`` only where a rank's capture was really cut
  (killed with its window open, crashed before its window closed, never finished), each with a
  ``partial_run`` diagnostic "the run is partial: rank N (pid P): why", which the ending repeats
  as "rank N: why". A ``sys.exit(3)`` or a kill after the window closed is said, not partial.
  Runs recorded before the capture said so (marked partial for any non-zero status) are judged
  here: cut short where a window opened and never closed (``settings["ranks"]["rank<N>"]
  ["window_end_ns"]``), a rank's ending is unknown, or the program did not finish.

An imported run marked partial by its importer says so (its diagnostics tell why).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.advisor import Advice, advise
from stepscope.advisor.base import Fix
from stepscope.advisor.rank_facts import CalibratedFacts, rank_facts
from stepscope.advisor.remedies import AFTER_WINDOW, GIVEN, PACED, UntracedSteps
from stepscope.analysis import Analysis, analyze
from stepscope.analysis.input import (
    HIGHLY_INPUT_BOUND_PCT,
    MODERATELY_INPUT_BOUND_PCT,
    VERDICT_TEXT,
)
from stepscope.errors import StepscopeError
from stepscope.progress import report as say_progress
from stepscope.reporters.timeline_build import DEFAULT_MAX_EVENTS, build_page
from stepscope.reporters.timeline_data import Page
from stepscope.schema_enums import StepSource
from stepscope.store.frameworks import run_frameworks
from stepscope.store.manifest import Manifest
from stepscope.store.run import Run

REPORT_SCHEMA = "stepscope.report/1"
_RANK_ENDED = re.compile(r"^rank (\d+) \(pid [^)]*\) ended by (.+)$")
_RANK_CUT = re.compile(r"^the run is partial: rank (\d+) \(pid [^)]*\): (.+)$")
_STATUS_CODES = ("program_exit_status", "program_killed", "program_not_finished")


@dataclass(frozen=True)
class Ending:
    """How the program ended (module docstring)."""

    text: str  # one line, "" for a clean run
    cut_short: bool  # data may be missing: the window did not close, an ending is unknown
    returncode: int | None  # the command's (recorded runs)


@dataclass(frozen=True)
class Report:
    run_path: Path
    manifest: Manifest
    analysis: Analysis
    advice: Advice
    page: Page | None = None  # what the HTML page shows beyond this (build_report(page=True))

    @property
    def ending(self) -> Ending:
        return run_ending(self.manifest)

    @property
    def frameworks(self) -> tuple[str, ...]:
        return run_frameworks(self.manifest)

    @property
    def input_pipeline(self) -> InputVerdict | None:
        return input_pipeline(self.analysis)


@dataclass(frozen=True)
class InputVerdict:
    """The run's input-pipeline verdict in the TensorFlow Profiler's tiers
    (``analysis.input``): the rank that waited most for input sets the job's pace."""

    verdict: str  # highly | moderately | not
    text: str  # "highly input-bound" ...
    input_bound_pct: float  # share of the step the device sat idle waiting for input
    rank: int
    highly_above_pct: float = HIGHLY_INPUT_BOUND_PCT
    moderately_from_pct: float = MODERATELY_INPUT_BOUND_PCT


def input_pipeline(analysis: Analysis) -> InputVerdict | None:
    """The verdict of the rank with the largest input-bound share; None when no rank's
    source recorded input waits (nothing measured)."""
    measured = [ra.input for ra in analysis.ranks if ra.input.verdict != "unknown"]
    if not measured:
        return None
    worst = max(measured, key=lambda i: i.input_bound_pct)
    return InputVerdict(worst.verdict, VERDICT_TEXT[worst.verdict], worst.input_bound_pct,
                        worst.rank)


# a finding's fix for each framework a program used, in the order they are preferred
_FIX_FIELD = {"pytorch": "pytorch", "jax": "jax", "tensorflow": "tensorflow", "cupy": "cuda",
              "triton": "cuda", "numba": "cuda"}


def fix_for(fix: Fix, frameworks: tuple[str, ...]) -> str:
    """The fix in the terms of the program's framework: a JAX program reads the JAX fix, a
    CuPy or Triton program the CUDA one; PyTorch first when the run does not say (or a
    program imported several: the first of pytorch, jax, tensorflow it used)."""
    order = [_FIX_FIELD[f] for f in frameworks if f in ("pytorch", "jax", "tensorflow")]
    order += [_FIX_FIELD[f] for f in frameworks if f not in ("pytorch", "jax", "tensorflow")]
    # another framework's fix is no fix for this program: only when the run does not say
    rest = ["cuda"] if frameworks else ["pytorch", "cuda", "tensorflow", "jax"]
    for name in [*order, *rest]:
        text = str(getattr(fix, name))
        if text:
            return text
    return ""


def build_report(run: Run, *, page: bool = False,
                 max_events: int | None = DEFAULT_MAX_EVENTS, workers: int | None = None,
                 engine: str = "process", address: str = "",
                 untraced_step_ms: float | None = None) -> Report:
    """The run's analysis and advice; with ``page``, also what the HTML page shows (its
    timeline of at most ``max_events`` events, the full kernel table, the longest copies):
    every reporter then renders the Report alone. The per-rank analysis (and the rules'
    per-rank facts, ``advisor.rank_facts``) runs on ``workers`` workers of ``engine``
    (``analysis.results``: None, a pool for runs with many events and ranks; 1, serial).
    ``untraced_step_ms``: the program's step measured without the profiler, to which the
    remedies are calibrated (``advisor.remedies``); the run's steps must be the program's
    (marked, not recovered from the kernel stream's periodicity: :func:`check_program_steps`).
    Without it, a recorded run's remedies are calibrated to the steps record timed right after
    its capture window (:func:`recorded_untraced`), where it timed them."""
    what, steps = "analysing the run", 3 if page else 2
    say_progress(what, 0, steps)
    untraced = (UntracedSteps(GIVEN, every=untraced_step_ms) if untraced_step_ms is not None
                else recorded_untraced(run.manifest))
    facts = rank_facts if untraced is None else CalibratedFacts(untraced)
    analysis = analyze(run, workers=workers, engine=engine, address=address, facts=facts)
    if untraced_step_ms is not None:
        check_program_steps(analysis, run.path)
    say_progress(what, 1, steps)
    advice = advise(analysis, untraced=untraced)
    say_progress(what, 2, steps)
    shown = build_page(run, analysis, max_events=max_events) if page else None
    say_progress(what, steps, steps)
    return Report(run_path=run.path, manifest=run.manifest, analysis=analysis, advice=advice,
                  page=shown)


def recorded_untraced(m: Manifest) -> UntracedSteps | None:
    """The median step record timed right after each rank's capture window (CUPTI detached,
    samplers stopped: ``manifest.overhead["rank<N>"]["median_step_ms_after_window"]``, at least
    3 steps), for the ranks where those steps speak for the program: not where the program's
    speed changed by itself (``step_time_ratio_after_unmeasurable``) nor where CUPTI stayed
    attached (the ``cupti_stays_attached`` diagnostic: those steps were traced). A rank without
    such steps (no step hook) gets its pace from the GPU's utilisation instead
    (:func:`util_pace`). None when no rank has either."""
    if m.source.kind != "capture" or any(d.code == "cupti_stays_attached"
                                         for d in m.diagnostics):
        return None
    per, paces = [], []
    for key, o in (m.overhead or {}).items():
        if not (key.startswith("rank") and key[4:].isdigit() and isinstance(o, dict)):
            continue
        ms = o.get("median_step_ms_after_window")
        if (isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0
                and not o.get("step_time_ratio_after_unmeasurable")):
            per.append((int(key[4:]), float(ms)))
        else:
            pace = util_pace(o)
            if pace is not None:
                paces.append((int(key[4:]), pace))
    if not per and not paces:
        return None
    return UntracedSteps(AFTER_WINDOW if per else PACED, per_rank=tuple(sorted(per)),
                         pace=tuple(sorted(paces)))


PACE_MIN_UTIL_PCT = 2.0  # the GPU busier than this after the window, for its pace to count
PACE_RANGE = (0.25, 1.05)  # util in the window over after it, outside: not the capture's cost


def util_pace(o: dict[str, Any]) -> float | None:
    """A rank's untraced over captured step from the GPU's utilisation in the capture window
    and after it (``capture.util_pace``: ``gpu_util_pct_window`` / ``gpu_util_pct_after_window``),
    at most 1 (a capture does not speed a program up); None without both, with the GPU
    nearly idle after the window, or with a ratio outside ``PACE_RANGE`` (the program changed
    speed by itself)."""
    w, a = o.get("gpu_util_pct_window"), o.get("gpu_util_pct_after_window")
    if not (isinstance(w, (int, float)) and isinstance(a, (int, float))):
        return None
    if isinstance(w, bool) or isinstance(a, bool) or a < PACE_MIN_UTIL_PCT or w <= 0:
        return None
    k = float(w) / float(a)
    return min(k, 1.0) if PACE_RANGE[0] <= k <= PACE_RANGE[1] else None


PROGRAM_STEPS = frozenset({StepSource.PROFILER_STEP.value, StepSource.ANNOTATION.value,
                           StepSource.NVTX.value, StepSource.HOOK.value, StepSource.MANUAL.value})


def check_program_steps(analysis: Analysis, path: Path) -> None:
    """Raise a StepscopeError unless every rank's steps are the program's own (marked), so that
    an untraced step time the user gives is one of them."""
    for ra in analysis.ranks:
        if ra.steps.source not in PROGRAM_STEPS:
            how = ("recovered from the periodicity of the kernel stream"
                   if ra.steps.source == StepSource.PERIODICITY.value
                   else "not found (the whole trace is one window)")
            raise StepscopeError(
                f"{path}: --untraced-step-ms needs the program's steps, and rank {ra.rank}'s "
                f"were {how}: mark them (stepscope.step(), torch.profiler's step(), a "
                f"repeated NVTX range named like a step) or leave out --untraced-step-ms")


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _rank_text(rank: int, ended: str) -> tuple[str, bool]:
    """What a rank's ending says, and whether it leaves the data in doubt."""
    if ended.startswith("signal:"):
        return f"rank {rank} was killed by {ended.split(':', 1)[1].strip()}", False
    if ended.startswith("exception:"):
        return f"rank {rank} raised {ended.split(':', 1)[1].strip()}", False
    if ended.startswith("exit status"):
        return f"rank {rank} exited with status {ended.removeprefix('exit status').strip()}", False
    return f"rank {rank} ended in an unknown way ({ended}: it left no record of its end)", True


def _open_windows(settings: dict[str, Any]) -> list[int]:
    """Ranks whose capture window opened and never closed (the process ended inside it
    without closing it: killed, or its last meta write lost)."""
    ranks = settings.get("ranks")
    out = []
    if isinstance(ranks, dict):
        for key, v in ranks.items():
            if (isinstance(v, dict) and key.startswith("rank") and key[4:].isdigit()
                    and v.get("window_start_ns") is not None and v.get("window_end_ns") is None):
                out.append(int(key[4:]))
    return sorted(out)


def run_ending(m: Manifest) -> Ending:
    """How the program ended and whether the run is cut short (module docstring)."""
    if m.source.kind != "capture":
        return Ending(text="the run is partial (see the diagnostics)" if m.partial else "",
                      cut_short=m.partial, returncode=None)
    raw = m.source.details.get("returncode")
    rc = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    parts: list[str] = []
    if rc is None:
        if m.partial:
            parts.append("the program did not finish")
    elif rc > 0:
        parts.append(f"the program exited with status {rc}")
    elif rc < 0:
        parts.append(f"the program was killed by {_signal_name(-rc)}")
    # the capture's own account of which ranks it cut and why (capture/endings.py)
    cuts = {int(h.group(1)): h.group(2) for h in (_RANK_CUT.match(d.message) for d in
                                                  m.diagnostics if d.code == "partial_run") if h}
    doubt = False
    for d in m.diagnostics:
        hit = _RANK_ENDED.match(d.message) if d.code == "process_ended" else None
        if hit is None or int(hit.group(1)) in cuts:
            continue
        ended = hit.group(2).strip()
        if rc is not None and ended in (f"exit status {rc}", f"signal: {_signal_name(-rc)}"):
            continue  # the return code already says it
        text, unknown = _rank_text(int(hit.group(1)), ended)
        parts.append(text)
        doubt = doubt or unknown
    parts += [f"rank {r}: {why}" for r, why in sorted(cuts.items())]
    if not m.partial:
        return Ending(text="; ".join(parts), cut_short=False, returncode=rc)
    if cuts or any(d.code in _STATUS_CODES for d in m.diagnostics):
        # the capture decided: partial means a rank's capture was cut, and says why
        return Ending(text="; ".join(parts) or "the run is marked partial (see the diagnostics)",
                      cut_short=True, returncode=rc)
    # runs recorded before the capture said why (partial for any non-zero status): judge here
    still_open = _open_windows(m.settings or {})
    suffix = ""
    if parts and still_open:
        suffix = (f" before the capture window closed (rank {', '.join(map(str, still_open))}):"
                  f" the window's last part may be missing")
    if not parts:
        parts.append("the run is marked partial (see the diagnostics)")
        doubt = True
    cut = doubt or bool(suffix) or rc is None
    return Ending(text="; ".join(parts) + suffix, cut_short=cut, returncode=rc)
