"""``record --live``: the panel and the line drawn from a fake capture feed (a staging folder the
test writes chunk by chunk), the pseudo-terminal relay of the program's output, and the option
end to end without a terminal."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from stepscope.capture import launcher
from stepscope.capture.config import ENV_VAR
from stepscope.capture.launcher import LaunchResult, launch
from stepscope.capture.live_feed import LiveSnapshot, ProcessLive
from stepscope.capture.staging import StagingPartition
from stepscope.cli import live, live_relay
from stepscope.cli.live import LiveView, line, render
from stepscope.cli.live_relay import Relay
from stepscope.cli.main import main

MS = 1_000_000


def shown(renderable: object, width: int = 100) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


SNAP = LiveSnapshot(processes=(ProcessLive(4242, 0, 120, 25.3, 131, 0.18),
                               ProcessLive(4243, 1, 118, 26.0, 129, None)),
                    gpu_busy=((0, 71.4), (1, 69.6)), chunks=6)


def test_panel_shows_the_figures() -> None:
    text = shown(render(SNAP, 75.0))
    assert "0:01:15 elapsed · 6 chunks read" in text
    rows = [" ".join(ln.strip("│ ").split()) for ln in text.splitlines()
            if "4242" in ln or "4243" in ln]
    assert rows == ["0 4242 131 25.3 ms 18%", "1 4243 129 26.0 ms -"]
    assert "GPU busy (NVML, last 10 s): gpu0 71%  gpu1 70%" in text
    assert "top so far: input_bound: the training thread waits for input 18%" in text


def test_panel_before_the_first_flush_and_with_nothing_standing_out() -> None:
    assert "waiting for the capture's first flush" in shown(render(LiveSnapshot(), 3.0))
    calm = LiveSnapshot(processes=(ProcessLive(1, None, 3, 10.0, 2, 0.0),), chunks=1)
    text = shown(render(calm, 3.0))
    assert "top so far: nothing stands out yet" in text and "waiting" not in text


def test_panel_lists_eight_processes_and_counts_the_rest() -> None:
    many = LiveSnapshot(processes=tuple(ProcessLive(100 + r, r, 5, 10.0, 4, 0.0)
                                        for r in range(11)), chunks=11)
    text = shown(render(many, 1.0), width=120)
    assert "107" in text and "108" not in text and "and 3 more processes" in text


def test_line_is_one_line() -> None:
    assert line(SNAP, 3725.0) == ("stepscope: live 1:02:05; rank 0 (+1 processes) step 131: "
                                  "25.3 ms/step, input wait 18%; GPU busy gpu0 71% gpu1 70%; "
                                  "top: input_bound")


def write_steps(part: StagingPartition, first: int, n: int, step_ms: int) -> None:
    part.write_chunk({"steps": {"ts_ns": [(first + i) * step_ms * MS for i in range(n)],
                                "dur_ns": [step_ms * MS] * n, "step": list(range(first, first + n)),
                                "source": ["manual"] * n}})


def test_without_a_terminal_a_line_only_when_new_figures_came(tmp_path: Path) -> None:
    out = io.StringIO()
    now = [100.0]
    view = LiveView(tmp_path, terminal=False, stream=out, clock=lambda: now[0])
    assert view.tick() is None  # nothing written yet
    part = StagingPartition.for_process(tmp_path, 9, 1)
    write_steps(part, 0, 4, 10)
    now[0] = 130.0
    assert view.tick() == "stepscope: live 0:00:30; pid 9 step 3: 10.0 ms/step, input wait 0%"
    assert view.tick() is None  # nothing new
    write_steps(part, 4, 4, 30)
    assert view.tick() is not None
    assert out.getvalue().count("\n") == 2


def test_the_programs_output_goes_through_a_pty_and_above_the_panel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as on a terminal: stdout and stderr are "terminals" (any fd will do for the window size)
    monkeypatch.setattr(live, "_tty_fd", lambda stream: 0)
    out = io.StringIO()
    prog = ("import sys\n"
            "print('out is a tty:', sys.stdout.isatty(), flush=True)\n"
            "print('err é', file=sys.stderr, flush=True)\n"
            "sys.stdout.write('no newline at the end')\n")
    with LiveView(tmp_path, terminal=True, stream=out) as view:
        fds = view.child_stdio()
        assert all(isinstance(fd, int) for fd in fds)
        result = launch([sys.executable, "-c", prog], dict(os.environ), stdout=fds[0],
                        stderr=fds[1], started=view.started)
    assert result.returncode == 0
    text = out.getvalue()
    assert "out is a tty: True" in text and "err é" in text and "no newline at the end" in text
    assert "stepscope record --live" in text  # the panel was drawn


def test_record_live_without_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    # a program of ~6 s of 20 ms steps: the capture flushes at 5 s, a line every 0.5 s is asked
    # for, so at least one line with its figures comes, and the program's output is its own
    monkeypatch.setattr(live, "LINE_EVERY_S", 0.5)
    script = tmp_path / "prog.py"
    script.write_text("import time, stepscope\nprint('hello from the program')\n"
                      "for _ in range(300):\n    time.sleep(0.02)\n    stepscope.step()\n")
    monkeypatch.chdir(tmp_path)
    code = main(["record", "--live", "--steps", "1-1000", "--sample-hz", "2", "--no-stacks",
                 "-o", str(tmp_path / "run"), "--", str(script)])
    assert code == 0
    got = capfd.readouterr()
    assert "hello from the program" in got.out
    lines = [ln for ln in got.err.splitlines() if ln.startswith("stepscope: live ")]
    assert lines and "ms/step" in lines[0], got.err
    assert (tmp_path / "run" / "manifest.json").exists()


def test_a_program_printing_fast_is_relayed_in_few_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every print above the panel redraws it: 60 lines over ~0.3 s come out whole, in a few
    # prints rather than one per line
    monkeypatch.setattr(live, "_tty_fd", lambda stream: 0)
    calls: list[str] = []
    monkeypatch.setattr(LiveView, "_print_above", lambda self, text: calls.append(text))
    prog = ("import time\nfor i in range(60):\n    print(f'line {i}', flush=True)\n"
            "    time.sleep(0.005)\n")
    with LiveView(tmp_path, terminal=True, stream=io.StringIO()) as view:
        fds = view.child_stdio()
        launch([sys.executable, "-c", prog], dict(os.environ), stdout=fds[0], stderr=fds[1],
               started=view.started)
    assert "\n".join(calls).splitlines() == [f"line {i}" for i in range(60)]
    assert len(calls) <= 10


# -- what the recorder does while the program runs (issue 24: --live must not slow the program) --
def test_the_relay_sleeps_while_the_program_is_quiet_and_ends_at_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a pipe stands in for a pty whose writer (a leftover child) stays open: the relay prints a
    # line as it comes, then waits without a timer; stop() ends it with the unfinished line
    timeouts: list[float | None] = []
    real = live_relay.select.select

    def counted(r: Any, w: Any, x: Any, timeout: float | None = None) -> Any:
        timeouts.append(timeout)
        return real(r, w, x, timeout)

    monkeypatch.setattr(live_relay.select, "select", counted)
    printed: list[str] = []
    rd, wr = os.pipe()
    relay = Relay(printed.append)
    relay.add(rd)
    t = threading.Thread(target=relay.run)
    t.start()
    os.write(wr, b"first line\nhalf a li")
    deadline = time.monotonic() + 5
    while not printed and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # quiet: the old relay woke 10 times a second here
    assert printed == ["first line"]
    assert len(timeouts) <= 3 and timeouts[-1] is None
    relay.stop()
    t.join(timeout=5)
    assert not t.is_alive()
    assert printed == ["first line", "half a li"]
    relay.close()
    os.close(wr)


def test_the_relay_serves_both_streams_on_one_thread() -> None:
    printed: list[str] = []
    fds = [os.pipe() for _ in range(2)]
    relay = Relay(printed.append)
    for rd, _ in fds:
        relay.add(rd)
    os.write(fds[0][1], "out é\n".encode())
    os.write(fds[1][1], b"err\nerr tail")
    for _, wr in fds:
        os.close(wr)  # the program ended: the relay ends by itself
    relay.run()
    assert sorted(printed) == ["err", "err tail", "out é"]
    relay.close()


def test_the_panel_is_refreshed_by_one_lowered_thread_not_by_richs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # rich's own refresh thread would read the feed under the lock the relay's prints wait
    # for; the view's thread reads outside it and runs nicer than the recorder
    monkeypatch.setattr(live, "REFRESH_S", 0.05)
    polled: list[tuple[bool, int]] = []
    view = LiveView(tmp_path, terminal=True, stream=io.StringIO())

    def poll() -> LiveSnapshot:
        lock = view._live._lock
        free = lock.acquire(blocking=False)
        if free:
            lock.release()
        polled.append((free, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return LiveSnapshot()

    monkeypatch.setattr(view.feed, "poll", poll)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with view:
        view.child_stdio()
        view.started()
        assert view._live._refresh_thread is None  # rich's auto-refresh is off
        deadline = time.monotonic() + 5
        while len(polled) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(polled) >= 2
    assert all(free for free, _ in polled)  # rich's lock not held while the chunks are read
    assert {nice for _, nice in polled} == {min(mine + live.BACKGROUND_NICE, 19)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # this thread's


def test_record_gives_the_program_the_same_capture_with_or_without_live(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever --live does happens in the recorder: the program's environment (its capture
    # configuration) and, off a terminal, its stdio are those of plain record
    seen: list[tuple[dict[str, str], int | None, int | None]] = []
    watched: list[bool] = []

    def fake_launch(cmd: list[str], env: dict[str, str], *, stdout: int | None = None,
                    stderr: int | None = None, started: Any = None) -> Any:
        watched.append(started is not None)  # the live view's path
        if started is not None:
            started()
        seen.append((dict(env), stdout, stderr))
        return LaunchResult(returncode=0, wall_s=0.0, pid=None)

    monkeypatch.setattr(launcher, "launch", fake_launch)
    script = tmp_path / "prog.py"
    script.write_text("pass\n")
    monkeypatch.chdir(tmp_path)
    for name, flags in (("plain", []), ("live", ["--live"])):
        main(["record", *flags, "--steps", "1-10", "-o", str(tmp_path / name), "--",
              str(script)])
    assert watched == [False, True]
    (env0, *io0), (env1, *io1) = seen
    cfg0, cfg1 = (json.loads(e.pop(ENV_VAR)) for e in (env0, env1))
    assert cfg0.pop("staging") != cfg1.pop("staging")
    assert cfg0 == cfg1 and env0 == env1 and io0 == io1 == [None, None]
