"""The torch.profiler hand-off on CPU: a profiler loop writes a trace and a run per cycle,
and prints one block of findings per cycle."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import stepscope
from stepscope.notebook.sources import is_run

torch = pytest.importorskip("torch")
import stepscope.torch as sst  # noqa: E402


def _train(prof: object, steps: int) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_on_trace_ready_writes_a_run_per_cycle(tmp_path: Path) -> None:
    out = io.StringIO()
    handler = sst.on_trace_ready(tmp_path / "log", worker_name="w0", use_gzip=True, file=out)
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
            on_trace_ready=handler) as prof:
        _train(prof, 12)
    assert len(handler.traces) == len(handler.runs) == 2
    for trace, run in zip(handler.traces, handler.runs):
        assert trace.parent == tmp_path / "log" and trace.name.startswith("w0.")
        assert trace.name.endswith(".pt.trace.json.gz")  # tensorboard_trace_handler's name
        assert run == trace.parent / trace.name.replace(".pt.trace.json.gz", ".stepscope")
        assert is_run(run)
        p = stepscope.load(run)
        assert p.steps().num_rows == 3  # the cycle's active steps
    printed = out.getvalue()
    heads = [ln for ln in printed.splitlines() if ln.startswith("stepscope: ")]
    assert len(heads) == 2 and printed.count("full report: ") == 2
    for run in handler.runs:
        assert f"stepscope: {run}: 3 steps" in printed
    folder = stepscope.load(tmp_path / "log")  # the folder: the last cycle, runs skipped
    assert folder.steps().num_rows == 3


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_profile_has_stepscopes_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    with sst.profile(tmp_path / "t") as prof:
        _train(prof, 9)
    handler = prof.on_trace_ready
    assert isinstance(handler, sst.TraceReady) and handler.dir == tmp_path / "t"
    assert prof.record_shapes is True
    assert len(handler.runs) == 1  # repeat=1
    active = sst.DEFAULT_SCHEDULE["active"]
    assert stepscope.load(handler.runs[0]).steps().num_rows == active
    assert f"{active} steps" in capsys.readouterr().out
    trace = json.loads(handler.traces[0].read_text())
    shapes = [e for e in trace["traceEvents"] if e.get("args", {}).get("Input Dims")]
    assert shapes  # record_shapes on
    with sst.profile(tmp_path / "n", schedule=None, on_trace_ready=None) as prof2:
        _train(prof2, 2)  # the caller's None wins: no schedule, no hand-off
    assert prof2.on_trace_ready is None and not (tmp_path / "n").exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_cycle_that_cannot_be_read_does_not_stop_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    handler = sst.on_trace_ready(tmp_path / "log", file=out)

    class Broken:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text("{not a trace")

    handler(Broken())  # no exception: the trace stays, one line says why
    assert handler.traces and handler.traces[0].exists() and handler.runs == []
    line = out.getvalue()
    assert line.count("\n") == 1 and "written, not analysed" in line
    monkeypatch.setenv("RANK", "1")  # other ranks write their runs silently
    quiet = io.StringIO()
    sst.on_trace_ready(tmp_path / "log2", file=quiet)(Broken())
    assert quiet.getvalue() == ""


def test_profile_without_torch_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_torch(name: str, *a: object) -> object:
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", no_torch)
    with pytest.raises(stepscope.StepscopeError, match="needs PyTorch"):
        sst.profile("x")
