"""HostSlot: a host capture that fails never breaks the program, it leaves a diagnostic."""

from __future__ import annotations

from typing import Any

from tests.capture.test_bootstrap import FakeClock, FakeHost

from stepscope.capture.config import CaptureConfig
from stepscope.capture.host_slot import HostSlot
from stepscope.store.manifest import Diagnostic


class Broken(FakeHost):
    def stop(self, keep_hooks: bool = False) -> None:
        raise RuntimeError("stuck sampler")

    def release_hooks(self) -> None:
        raise RuntimeError("hook gone")


def cfg(tmp: Any) -> CaptureConfig:
    return CaptureConfig(staging=str(tmp))


def test_start_stop_keep_hooks_release(tmp_path: Any) -> None:
    diags: list[Diagnostic] = []
    hosts: list[FakeHost] = []

    def make(c: Any, r: int, clk: Any) -> FakeHost:
        hosts.append(FakeHost(clk))
        return hosts[-1]

    slot = HostSlot(make, diags)
    seen: list[int] = []
    assert not slot.mark_step()  # nothing runs yet: the caller handles the boundary
    slot.start(cfg(tmp_path), 0, FakeClock(), seen.append)
    assert slot.running and slot.mark_step() and seen == [0]
    assert "samples" in slot.stop(keep_hooks=True)
    assert hosts[0].hooks_kept and not slot.running and not slot.mark_step()
    slot.release_hooks()
    assert hosts[0].released == 1 and diags == []
    assert slot.for_manifest()[0] == {"fake": True}


def test_failures_become_diagnostics(tmp_path: Any) -> None:
    diags: list[Diagnostic] = []

    def refuse(c: Any, r: int, clk: Any) -> FakeHost:
        raise OSError("no /proc")

    slot = HostSlot(refuse, diags)
    slot.start(cfg(tmp_path), 0, FakeClock(), lambda k: None)
    assert slot.host is None and slot.stop() == {} and slot.for_manifest() == (None, ())
    broken = HostSlot(lambda c, r, clk: Broken(clk), diags)
    broken.start(cfg(tmp_path), 0, FakeClock(), lambda k: None)
    assert broken.stop() == {}
    broken.release_hooks()
    assert [d.code for d in diags] == ["host_capture_failed"] * 3
    assert "no /proc" in diags[0].message and "stuck sampler" in diags[1].message
    assert "hook gone" in diags[2].message
