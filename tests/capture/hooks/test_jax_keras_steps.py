"""Step boundaries without code changes for JAX and Keras, on fake modules shaped like the real ones.

JAX and Keras are not installed for the tests; the fakes copy the shape the hooks rely on:

- JAX: ``jax/_src/profiler.py`` of jax-ml/jax (read at commit 0005b22b; the same layout since
  JAX 0.2): ``TraceAnnotation`` subclasses jaxlib's ``_profiler.TraceMe`` (a C++ class whose
  ``__enter__`` returns the annotation and whose ``__exit__`` does not swallow exceptions), and
  ``StepTraceAnnotation(TraceAnnotation)`` defines only ``__init__(self, name, **kwargs)``, which
  calls ``super().__init__(name, _r=1, **kwargs)``; ``jax/profiler.py`` re-exports the class.
- Keras 3: ``keras/src/callbacks/callback_list.py`` of keras-team/keras (commit 166ffd23, Keras
  3.x): ``CallbackList.on_train_batch_end(batch, logs=None)`` dispatches the callbacks, on a
  thread pool when they allow it; ``keras/src/backend/jax/trainer.py`` ``fit()`` calls
  ``on_train_batch_begin(begin_step)``, the train function, then
  ``on_train_batch_end(end_step, logs)`` for every batch, and ``on_test_batch_*`` in
  ``evaluate()``; ``keras/src/callbacks/__init__.py`` re-exports ``CallbackList``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stepscope.capture.hooks.install import TorchHooks
from stepscope.capture.hooks.jax_steps import JAX_STEP
from stepscope.capture.hooks.keras_steps import KERAS_STEP
from stepscope.capture.host import HostCapture, HostSettings

FAKE_JAX_PROFILER = '''
log = []

class TraceMe:  # stands in for jaxlib's C++ _profiler.TraceMe
    def __init__(self, name, **kwargs):
        self._name, self._kwargs = name, kwargs

    def __enter__(self):
        if self._kwargs.get("fail_enter"):
            raise RuntimeError("TraceMe could not start")
        log.append(("enter", self._name))
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        log.append(("exit", self._name))


class TraceAnnotation(TraceMe):
    """Context manager that generates a trace event in the profiler."""


class StepTraceAnnotation(TraceAnnotation):
    """Context manager that generates a step trace event in the profiler."""

    def __init__(self, name: str, **kwargs):
        super().__init__(name, _r=1, **kwargs)
'''

FAKE_KERAS_CALLBACK_LIST = '''
import concurrent.futures


class Callback:
    def on_train_batch_end(self, batch, logs=None):
        pass


class CallbackList(Callback):
    """Container abstracting a list of callbacks."""

    def __init__(self, callbacks=None, add_history=False, add_progbar=False, model=None, **params):
        self.callbacks = list(callbacks) if callbacks else []
        self._futures = []
        self._async_train = not self.callbacks
        self._executor = concurrent.futures.ThreadPoolExecutor() if self._async_train else None

    def _async_dispatch(self, fn, *args):
        self._futures.append(self._executor.submit(fn, *args))

    def _clear_futures(self):
        for future in self._futures:
            future.result()
        self._futures = []

    def on_train_batch_begin(self, batch, logs=None):
        for callback in self.callbacks:
            callback.on_train_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        if self._async_train:
            self._async_dispatch(self._on_train_batch_end, batch, logs)
        else:
            self._on_train_batch_end(batch, logs)

    def _on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs=logs)

    def on_test_batch_end(self, batch, logs=None):
        for callback in self.callbacks:
            callback.on_test_batch_end(batch, logs=logs)

    def on_train_end(self, logs=None):
        if self._async_train:
            self._clear_futures()


def fit(callbacks, batches, evaluate_every=0):
    """The loop of keras/src/backend/jax/trainer.py fit(), minus the model."""
    seen = []
    for step in range(batches):
        callbacks.on_train_batch_begin(step)
        logs = {"loss": 1.0 / (step + 1)}
        callbacks.on_train_batch_end(step, logs)
        seen.append(step)
        if evaluate_every and (step + 1) % evaluate_every == 0:
            callbacks.on_test_batch_end(0, {})
    callbacks.on_train_end()
    return seen
'''

FILES = {
    "jax/__init__.py": "from jax import profiler as profiler\n",
    "jax/profiler.py": "from jax._src.profiler import (\n"
                       "  StepTraceAnnotation as StepTraceAnnotation,\n"
                       "  TraceAnnotation as TraceAnnotation,\n)\n",
    "jax/_src/__init__.py": "",
    "jax/_src/profiler.py": FAKE_JAX_PROFILER,
    "keras/__init__.py": "from keras.src import callbacks as callbacks\n",
    "keras/src/__init__.py": "",
    "keras/src/callbacks/__init__.py": "from keras.src.callbacks.callback_list import CallbackList, fit\n",
    "keras/src/callbacks/callback_list.py": FAKE_KERAS_CALLBACK_LIST,
}


def _forget_fakes() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in ("jax", "keras", "tf_keras")]:
        del sys.modules[name]


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Fake ``jax`` and ``keras`` packages on sys.path; any real ones are hidden meanwhile."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("jax", "keras", "tf_keras")]:
        monkeypatch.delitem(sys.modules, name)
    for rel, text in FILES.items():
        path = tmp_path / "fakes" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    yield tmp_path / "fakes"
    _forget_fakes()


def _capture() -> HostCapture:
    return HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False, hooks=True))


def _jax_train(jax: Any, steps: int, name: str = "train") -> list[int]:
    out = []
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation(name, step_num=i) as annotation:
            assert isinstance(annotation, jax.profiler.StepTraceAnnotation)  # __enter__'s result
            out.append(i)
    return out


def test_jax_step_annotations_mark_steps_after_import(fakes: Path) -> None:
    cap = _capture()
    ticks: list[int] = []
    cap.add_step_listener(ticks.append)
    cap.start()
    try:
        jax = importlib.import_module("jax")  # imported after the capture started (the usual case)
        src = sys.modules["jax._src.profiler"]
        assert _jax_train(jax, 5) == [0, 1, 2, 3, 4]
        assert src.log == [(e, "train") for _ in range(5) for e in ("enter", "exit")]
        # exceptions inside the step, and from the annotation itself, pass through
        with pytest.raises(KeyError, match="inside"):
            with jax.profiler.StepTraceAnnotation("train", step_num=5):
                raise KeyError("inside")
        with pytest.raises(RuntimeError, match="could not start"):
            with jax.profiler.StepTraceAnnotation("train", step_num=6, fail_enter=True):
                pass  # pragma: no cover
    finally:
        cap.stop()
    assert ticks == [0, 1, 2, 3, 4, 5]  # the failed __enter__ is no step
    data = cap.drain()
    assert data["steps"]["step"] == [0, 1, 2, 3, 4] and set(data["steps"]["source"]) == {"hook"}
    samplers = cap.settings_for_manifest()["samplers"]
    assert samplers["steps"] == {"boundaries": 6, "source": "hook", "hook": JAX_STEP}
    assert samplers["hooks"]["jax._src.profiler"] == "patched jax._src.profiler.StepTraceAnnotation"
    # uninstalled: the class is as it was (inherited __enter__, its own __init__)
    cls = src.StepTraceAnnotation
    assert "__enter__" not in cls.__dict__ and cls.__init__.__qualname__ == "StepTraceAnnotation.__init__"
    assert not hasattr(cls.__init__, "__wrapped__")
    _jax_train(jax, 2)
    assert ticks == [0, 1, 2, 3, 4, 5]


def test_jax_annotation_names_pace_the_steps(fakes: Path) -> None:
    jax = importlib.import_module("jax")  # imported before the capture started
    cap = _capture()
    cap.start()
    try:
        _jax_train(jax, 2, "eval")  # an evaluation before training paces until "train" shows up
        for i in range(4):
            with jax.profiler.StepTraceAnnotation(f"train_step_{i}"):  # one name, digits aside
                with jax.profiler.StepTraceAnnotation("inner"):  # nested: not a step
                    pass
            if i == 1:
                _jax_train(jax, 3, "eval")  # an evaluation loop in between: not steps
    finally:
        cap.stop()
    assert cap.settings_for_manifest()["samplers"]["steps"]["boundaries"] == 2 + 4


def test_keras_train_batches_mark_steps(fakes: Path) -> None:
    keras = importlib.import_module("keras")
    module = sys.modules["keras.src.callbacks.callback_list"]
    original = module.CallbackList.__dict__["on_train_batch_end"]
    cap = _capture()
    ticks: list[tuple[int, str]] = []
    cap.add_step_listener(lambda k: ticks.append((k, threading.current_thread().name)))
    cap.start()
    try:
        seen = keras.callbacks.fit(keras.callbacks.CallbackList(), 6, evaluate_every=2)
        assert seen == list(range(6))

        class Failing:
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                pass

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                raise ValueError(f"callback failed at {batch} with {logs}")

        with pytest.raises(ValueError, match=re.escape("callback failed at 0 with {'loss': 1.0}")):
            keras.callbacks.fit(keras.callbacks.CallbackList([Failing()]), 3)
    finally:
        cap.stop()
    # 6 batches + the one whose callback raised; evaluation batches are not steps; the marks
    # are made on the training thread, not on Keras's callback thread pool
    assert ticks == [(k, threading.main_thread().name) for k in range(7)]
    samplers = cap.settings_for_manifest()["samplers"]
    assert samplers["steps"]["hook"] == KERAS_STEP
    assert samplers["hooks"]["keras.src.callbacks.callback_list"] == \
        "patched keras.src.callbacks.callback_list.CallbackList"
    assert "keras.src.callbacks" not in samplers["hooks"]  # same class: patched once
    assert module.CallbackList.__dict__["on_train_batch_end"] is original


def test_first_hook_wins_and_manual_marks_win_over_hooks(fakes: Path) -> None:
    jax = importlib.import_module("jax")
    keras = importlib.import_module("keras")
    cap = _capture()
    cap.start()
    try:
        for i in range(3):  # Keras batches, each inside a StepTraceAnnotation: 3 steps, not 6
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                keras.callbacks.fit(keras.callbacks.CallbackList(), 1)
        assert cap.settings_for_manifest()["samplers"]["steps"] == {
            "boundaries": 3, "source": "hook", "hook": JAX_STEP}
        cap.mark_step()
        _jax_train(jax, 2)
        cap.mark_step()
    finally:
        cap.stop()
    assert cap.settings_for_manifest()["samplers"]["steps"]["boundaries"] == 5
    assert cap.settings_for_manifest()["samplers"]["steps"]["source"] == "manual"


def test_no_marker_callback_no_jax_or_keras_patches(fakes: Path) -> None:
    jax = importlib.import_module("jax")
    cls = jax.profiler.StepTraceAnnotation
    hooks = TorchHooks(clock=lambda: 0, on_wait=lambda *a: None, on_iterator=lambda *a: None,
                       on_optimizer_step=lambda o: None, on_error=lambda c, m: None)
    hooks.install()
    try:
        assert "__enter__" not in cls.__dict__
        assert not any(k.startswith(("jax", "keras")) for k in hooks.installed)
    finally:
        hooks.uninstall()


def test_hook_failures_never_break_the_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of that name without the expected class: noted, nothing patched, no error."""
    for name in ("jax._src.profiler", "keras.src.callbacks.callback_list"):
        module = ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.StepTraceAnnotation = 42  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    errors: list[tuple[str, str]] = []
    marks: list[str] = []
    hooks = TorchHooks(clock=lambda: 0, on_wait=lambda *a: None, on_iterator=lambda *a: None,
                       on_optimizer_step=lambda o: None, on_error=lambda c, m: errors.append((c, m)),
                       on_step_marker=marks.append)
    hooks.install()
    hooks.uninstall()
    assert hooks.installed["jax._src.profiler"].startswith("not patched")
    assert hooks.installed["keras.src.callbacks.callback_list"].startswith("not patched")
    assert errors == [] and marks == []
