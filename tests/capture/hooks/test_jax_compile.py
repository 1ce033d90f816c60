"""JAX compilations seen through ``jax.monitoring`` (``capture.hooks.jax_compile``), on a fake
module shaped like the real one: ``jax/_src/monitoring.py`` of jax-ml/jax keeps a list of
duration listeners, ``register_event_duration_secs_listener(callback)`` appends to it, and
``record_event_duration_secs(event, duration, **kwargs)`` calls each with
``(event, duration, **kwargs)``; ``jax/monitoring.py`` re-exports both."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepscope.capture.host import HostCapture, HostSettings

FAKE_MONITORING = '''
_listeners = []

def register_event_duration_secs_listener(callback):
    _listeners.append(callback)

def record_event_duration_secs(event, duration, **kwargs):
    for fn in _listeners:
        fn(event, duration, **kwargs)
'''

FILES = {
    "jax/__init__.py": "from jax import monitoring as monitoring\n",
    "jax/monitoring.py": "from jax._src.monitoring import (\n"
                         "  record_event_duration_secs as record_event_duration_secs,\n"
                         "  register_event_duration_secs_listener as "
                         "register_event_duration_secs_listener,\n)\n",
    "jax/_src/__init__.py": "",
    "jax/_src/monitoring.py": FAKE_MONITORING,
}


@pytest.fixture
def fake_jax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [n for n in sys.modules if n.split(".")[0] == "jax"]:
        monkeypatch.delitem(sys.modules, name)
    for rel, text in FILES.items():
        path = tmp_path / "fakes" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "jax"]:
        del sys.modules[name]


def test_a_compile_event_notes_its_end_and_nothing_else_does(fake_jax: None) -> None:
    t = [1_000]
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False, hooks=True),
                      clock=lambda: t[0])
    cap.start()
    try:
        jax = importlib.import_module("jax")
        src = sys.modules["jax._src.monitoring"]
        assert len(src._listeners) == 1  # once, though both modules were imported
        assert cap.last_compile_ns is None
        t[0] = 5_000
        jax.monitoring.record_event_duration_secs("/jax/core/compile/backend_compile_duration",
                                                  2.5, fun_name="train_step")
        assert cap.last_compile_ns == 5_000
        t[0] = 9_000
        jax.monitoring.record_event_duration_secs("/jax/pjit/some_other_duration", 0.1)
        assert cap.last_compile_ns == 5_000  # not a compile
    finally:
        cap.stop()
    t[0] = 12_000
    jax.monitoring.record_event_duration_secs("/jax/core/compile/backend_compile_duration", 1.0)
    assert cap.last_compile_ns == 5_000  # after the capture the listener does nothing
    assert len(src._listeners) == 1


def test_a_module_without_the_listener_api_is_noted_not_broken(
        fake_jax: None, tmp_path: Path) -> None:
    (tmp_path / "fakes" / "jax" / "_src" / "monitoring.py").write_text("x = 1\n")
    (tmp_path / "fakes" / "jax" / "monitoring.py").write_text("x = 1\n")
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False, hooks=True))
    cap.start()
    try:
        importlib.import_module("jax")
    finally:
        cap.stop()
    assert cap.last_compile_ns is None
    hooks = cap.settings_for_manifest()["samplers"]["hooks"]
    assert "no register_event_duration_secs_listener" in hooks["jax.monitoring"]
