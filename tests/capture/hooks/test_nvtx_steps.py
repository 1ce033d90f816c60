"""``--nvtx NAME``: NVTX ranges named NAME are the step boundaries.

The fake ``nvtx`` module copies the shape of NVIDIA's ``nvtx`` Python package (0.2.x:
``push_range(message=None, color=None, domain=None, category=None, payload=None)``,
``start_range(...)`` returning a range id, ``pop_range``, and the ``annotate`` context manager /
decorator keeping its message in ``self.attributes.message``); ``torch.cuda.nvtx`` has
``range_push(msg)`` and a ``range(msg)`` context manager that calls the module's ``range_push``.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from stepscope.capture.hooks.install import TorchHooks
from stepscope.capture.hooks.nvtx_steps import NVTX_STEP
from stepscope.capture.host import HostCapture, HostSettings


def fake_nvtx(name: str) -> ModuleType:
    m = ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.log = []  # type: ignore[attr-defined]

    def push_range(message: Any = None, color: Any = None, domain: Any = None, **kw: Any) -> None:
        m.log.append(("push", message))  # type: ignore[attr-defined]

    def range_push(msg: str) -> int:
        m.log.append(("push", msg))  # type: ignore[attr-defined]
        return 0

    def range(msg: str) -> Any:  # noqa: A001 - torch's name
        import contextlib

        @contextlib.contextmanager
        def cm() -> Iterator[None]:
            m.range_push(msg)  # type: ignore[attr-defined]  # looked up at call time, as torch does
            yield

        return cm()

    class annotate:  # noqa: N801 - the package's name
        def __init__(self, message: Any = None, **kw: Any) -> None:
            self.attributes = SimpleNamespace(message=SimpleNamespace(string=message))

        def __enter__(self) -> annotate:
            m.log.append(("enter", self.attributes.message.string))  # type: ignore[attr-defined]
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

    m.push_range, m.range_push, m.range, m.annotate = push_range, range_push, range, annotate  # type: ignore[attr-defined]
    return m


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    pkg, tnv = fake_nvtx("nvtx"), fake_nvtx("torch.cuda.nvtx")
    monkeypatch.setitem(sys.modules, "nvtx", pkg)
    monkeypatch.setitem(sys.modules, "torch.cuda.nvtx", tnv)
    return pkg, tnv


def hooks(marks: list[str], name: str = "train_step") -> TorchHooks:
    return TorchHooks(clock=lambda: 0, on_wait=lambda *a: None, on_iterator=lambda *a: None,
                      on_optimizer_step=lambda o: None, on_error=lambda c, m: None,
                      on_step_marker=marks.append, nvtx_step=name)


def test_ranges_named_like_the_step_mark_boundaries(modules: tuple[ModuleType, ModuleType]) -> None:
    pkg, tnv = modules
    marks: list[str] = []
    h = hooks(marks)
    h.install()
    try:
        pkg.push_range("train_step")  # type: ignore[attr-defined]
        pkg.push_range(message="forward")  # type: ignore[attr-defined]
        pkg.push_range(message="train_step 12")  # type: ignore[attr-defined]
        pkg.push_range("train_steps")  # a different name: no boundary  # type: ignore[attr-defined]
        with pkg.annotate("train_step#3"):  # type: ignore[attr-defined]
            pass
        with tnv.range("train_step"):  # type: ignore[attr-defined]
            pass
        tnv.range_push("backward")  # type: ignore[attr-defined]
        assert marks == [NVTX_STEP] * 4
        # the originals still ran, with their arguments
        assert [x[1] for x in pkg.log] == ["train_step", "forward", "train_step 12", "train_steps",  # type: ignore[attr-defined]
                                           "train_step#3"]
        assert [x[1] for x in tnv.log] == ["train_step", "backward"]  # type: ignore[attr-defined]
        assert h.installed["nvtx"].startswith("patched")
    finally:
        h.uninstall()
    pkg.push_range("train_step")  # type: ignore[attr-defined]
    assert len(marks) == 4  # uninstalled: originals back
    assert not getattr(pkg.push_range, "__stepscope__", False)  # type: ignore[attr-defined]


def test_without_nvtx_option_nothing_is_patched(modules: tuple[ModuleType, ModuleType]) -> None:
    pkg, _ = modules
    original = pkg.push_range  # type: ignore[attr-defined]
    h = hooks([], name="")
    h.install()
    try:
        assert pkg.push_range is original  # type: ignore[attr-defined]
    finally:
        h.uninstall()


def test_host_capture_counts_only_the_nvtx_steps(modules: tuple[ModuleType, ModuleType]) -> None:
    pkg, _ = modules
    host = HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False, nvtx_step="step"))
    seen: list[int] = []
    host.add_step_listener(seen.append)
    host.start()
    try:
        host._steps.on_optimizer_step(object())  # an optimizer steps too: not a boundary here
        for _ in range(3):
            pkg.push_range("step")  # type: ignore[attr-defined]
    finally:
        host.stop()
    assert seen == [0, 1, 2]
    assert host.settings_for_manifest()["samplers"]["steps"]["hook"] == NVTX_STEP
