"""The diff in the terminal (rich): the verdict, the step-time shift with its interval, the
categories, kernels, ops and findings that moved. Trace names are plain text, never markup."""

from __future__ import annotations

import io
import math

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from stepscope.compare import Change, Diff, RunRef
from stepscope.reporters.terminal import (
    LABEL,
    STYLE,
    WIDTH,
    console_for_stdout,
    printable_renderable,
)

ROWS = 8
VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "same": "bold",
                 "inconclusive": "bold yellow"}


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _table(*cols: str) -> Table:
    """A borderless table; the first column (a name) left-aligned, the others right."""
    tab = Table(expand=False, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for i, c in enumerate(cols):
        tab.add_column(c, justify="left" if i == 0 or c in ("", "verdict") else "right",
                       no_wrap=True)
    return tab


def _side(word: str, refs: tuple[RunRef, ...]) -> Text:
    t = Text(f"{word:<5}", style="bold")
    for i, r in enumerate(refs):
        t.append(("\n     " if i else " ") + r.label)
        steps = f"{r.steady_steps} steady step" + ("" if r.steady_steps == 1 else "s")
        t.append(f"  ({ranks_text(r.ranks)}; {steps})", style="dim")
    return t


def ranks_text(ranks: tuple[int, ...]) -> str:
    """``rank 0``, ``ranks 0-7``, ``ranks 0, 2``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    contiguous = list(ranks) == list(range(ranks[0], ranks[-1] + 1))
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else "ranks " + ", ".join(map(str, ranks))


def ms(v: float) -> str:
    """Milliseconds, two decimals, or three significant digits below 1 ms."""
    return f"{v:.2f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"


def _pct(v: float) -> str:
    return "?" if not math.isfinite(v) else f"{v:+.1f}%"


def _headline(d: Diff) -> Text:
    s = d.step
    t = Text()
    t.append(d.verdict.value.upper(), style=VERDICT_STYLE[d.verdict.value])
    if math.isfinite(s.base_ms) and math.isfinite(s.new_ms):
        t.append(f": median step {ms(s.base_ms)} -> {ms(s.new_ms)} ms, shift "
                 f"{'+' if s.shift_ms >= 0 else ''}{ms(s.shift_ms)} ms ({_pct(s.change_pct)})")
    t.append(f"\n{s.reason} ({d.test}; 'same' within ±{s.margin_pct:g}%)", style="dim")
    t.append(f"\nAligned: {d.alignment}", style="dim")
    return t


def _categories(d: Diff) -> list[RenderableType]:
    tab = _table("category", "base", "new", "delta")
    for c in d.categories:
        if c.base_ms == 0 and c.new_ms == 0:
            continue
        tab.add_row(Text("■ ", style=STYLE[c.name]) + Text(LABEL[c.name]), f"{c.base_ms:.2f}",
                    f"{c.new_ms:.2f}", Text(f"{c.delta_ms:+.2f}", style=_sign(c.delta_ms)))
    b, n = d.mean_ms
    out: list[RenderableType] = [Text(f"Where the change came from (ms per steady step; mean "
                                      f"step {ms(b)} -> {ms(n)} ms)", style="bold"), tab]
    moved = [c for c in d.causes if abs(c.delta_ms) >= 0.005][:ROWS]
    if moved:
        cause = _table("the GPU's time, by what it waited for", "base", "new", "delta")
        for c in moved:
            cause.add_row(CAUSE_LABEL.get(c.name, c.name), f"{c.base_ms:.2f}", f"{c.new_ms:.2f}",
                          Text(f"{c.delta_ms:+.2f}", style=_sign(c.delta_ms)))
        out += [Text(), cause]
    return out


# the idle split's causes (compare.sides.CAUSES): what the GPU waited for while idle
CAUSE_LABEL = {"compute": "GPU compute", "communication": "exposed communication",
               "copies": "exposed copies", "input_wait": "idle: waiting for input",
               "sync": "idle: syncs (blocked, and the queue refilling after)",
               "step_gaps": "idle: gaps at step boundaries",
               "launch": "idle: launch overhead", "host": "idle: host work (incl. unrecorded)"}


def _sign(delta: float) -> str:
    return "red" if delta > 0 else ("green" if delta < 0 else "")


def _changes(title: str, rows: tuple[Change, ...], limit: int = ROWS) -> list[RenderableType]:
    shown = [c for c in rows if abs(c.delta_ms) > 0][:limit]
    if not shown:
        return []
    tab = _table("name", "calls/step", "base ms", "new ms", "delta", "")
    for c in shown:
        calls = f"{_calls(c.base)} -> {_calls(c.new)}"
        how = {"new": "new", "gone": "gone"}.get(c.status, "")
        if c.matched_by and c.matched_by != "name":
            how = f"was {_short((c.base_name or '').removeprefix('void '), 16)}"
        tab.add_row(Text(_short(c.name.removeprefix("void "), 34)), calls, f"{c.base_ms:.3f}", f"{c.new_ms:.3f}",
                    Text(f"{c.delta_ms:+.3f}", style=_sign(c.delta_ms)), Text(how, style="dim"))
    return [Text(title, style="bold"), tab, Text()]


def _calls(u: object) -> str:
    calls = getattr(u, "calls", None)
    return "-" if calls is None else calls_text(calls)


def calls_text(calls: float) -> str:
    """``12``, ``25.3``, ``0.5``: calls per step, one decimal at most."""
    return f"{calls:.1f}".removesuffix(".0")


def _findings(d: Diff) -> list[RenderableType]:
    moved = [f for f in d.findings if f.status != "unchanged"]
    if not moved:
        return [Text("Findings: none appeared, went away or changed.", style="bold")]
    out: list[RenderableType] = [Text("Findings", style="bold")]
    for f in moved:
        line = Text(f"{f.status:<9} ", style={"appeared": "red", "gone": "green"}.get(f.status, "yellow"))
        line.append(f.id)
        if f.base and f.new:
            line.append(f"  {f.base.severity} -> {f.new.severity}, saving "
                        f"{f.base.est_saving_ms:.2f} -> {f.new.est_saving_ms:.2f} ms/step")
        side = f.new or f.base
        if side is not None:
            line.append(f"\n          {_short(side.title, WIDTH - 10)}", style="dim")
        out.append(line)
    return out


def render_diff(d: Diff) -> Group:
    parts: list[RenderableType] = [
        Text("stepscope diff", style="bold"), _side("BASE", d.base), _side("NEW", d.new), Text(),
        _headline(d), Text(), *_categories(d), Text()]
    parts += _changes("Kernels that changed most (per steady step)", d.kernels)
    parts += _changes("Ops that changed most (per steady step, inclusive time)", d.ops)
    parts += _findings(d)
    if d.ranks:
        tab = _table("rank", "base ms", "new ms", "change", "verdict")
        for r in d.ranks:
            tab.add_row(str(r.base_rank), ms(r.step.base_ms), ms(r.step.new_ms),
                        _pct(r.step.change_pct), Text(r.step.verdict.value))
        parts += [Text(), Text("Per rank (median steady step)", style="bold"), tab]
    return Group(*parts)


def print_diff(d: Diff, console: Console | None = None) -> None:
    console = console or console_for_stdout()
    console.print(printable_renderable(render_diff(d)))


def diff_text(d: Diff, width: int = WIDTH) -> str:
    """The diff as plain text (no colour)."""
    console = Console(width=width, record=True, color_system=None, file=io.StringIO(),
                      force_jupyter=False)  # text only: never a display in a notebook
    console.print(printable_renderable(render_diff(d)))
    return console.export_text()
