"""TensorFlow step markers without code changes, on a fake module shaped like the real one.

TensorFlow is not installed for the tests; the fake copies the shape the hook relies on from
tensorflow/tensorflow ``tensorflow/python/profiler/trace.py`` (TF 2.x): ``Trace`` is a plain
class, ``__init__(self, name, **kwargs)`` starts a ``TraceMe`` when the profiler is enabled,
``__enter__`` returns the trace and ``__exit__`` stops the ``TraceMe``.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepscope.capture.hooks.tf_steps import TF_STEP
from stepscope.capture.host import HostCapture, HostSettings

FAKE_TRACE = '''
log = []
enabled = True


class Trace(object):
    """Context manager that generates a trace event in the profiler."""

    def __init__(self, name, **kwargs):
        self._name = name if enabled else None
        self._kwargs = kwargs
        log.append(("start", name))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        log.append(("stop", self._name))
'''

FILES = {
    "tensorflow/__init__.py": "",
    "tensorflow/python/__init__.py": "",
    "tensorflow/python/profiler/__init__.py": "",
    "tensorflow/python/profiler/trace.py": FAKE_TRACE,
}


@pytest.fixture
def fake_tf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in [n for n in sys.modules if n.split(".")[0] == "tensorflow"]:
        monkeypatch.delitem(sys.modules, name)
    for rel, text in FILES.items():
        path = tmp_path / "fakes" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    yield tmp_path / "fakes"
    for name in [n for n in sys.modules if n.split(".")[0] == "tensorflow"]:
        del sys.modules[name]


def _loop(trace: Any, steps: int, name: str = "train", **kw: Any) -> None:
    for i in range(steps):
        with trace.Trace(name, step_num=i, _r=1, **kw) as t:
            assert isinstance(t, trace.Trace)


def test_tf_step_traces_mark_steps(fake_tf: Path) -> None:
    cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False, hooks=True))
    ticks: list[int] = []
    cap.add_step_listener(ticks.append)
    cap.start()
    try:
        trace = importlib.import_module("tensorflow.python.profiler.trace")
        _loop(trace, 4)
        with trace.Trace("data_loading"):  # no step_num: a plain trace, no step
            pass
        _loop(trace, 3, name="eval")  # another name: does not pace the steps
        with pytest.raises(KeyError, match="inside"):  # exceptions pass through
            with trace.Trace("train", step_num=4, _r=1):
                raise KeyError("inside")
        assert trace.log[:2] == [("start", "train"), ("stop", "train")]
    finally:
        cap.stop()
    assert ticks == [0, 1, 2, 3, 4]
    samplers = cap.settings_for_manifest()["samplers"]
    assert samplers["steps"]["hook"] == TF_STEP
    assert samplers["hooks"]["tensorflow.python.profiler.trace"] == \
        "patched tensorflow.python.profiler.trace.Trace"
    cls = trace.Trace  # uninstalled: the class is as it was
    assert not hasattr(cls.__init__, "__wrapped__") and not hasattr(cls.__enter__, "__wrapped__")
    _loop(trace, 2)
    assert ticks == [0, 1, 2, 3, 4]
