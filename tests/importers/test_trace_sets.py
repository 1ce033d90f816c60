"""Which files make one run (importers.trace_sets): TensorBoard log folders, profiler cycles,
ranks of different jobs (issue 19, item 4)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from stepscope.cli.main import main
from stepscope.errors import TraceFormatError
from stepscope.importers import import_traces
from stepscope.store import Run

S = 1_000_000_000  # ns


def _trace(path: Path, *, pid: int = 10, start_s: float = 0.0, rank: int | None = None,
           world: int | None = None, gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    """A small trace: 3 ProfilerSteps of 10 ms, each with a kernel and its launch."""
    events: list[dict[str, Any]] = []
    for i in range(3):
        t = i * 10_000.0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": pid,
             "tid": pid, "ts": t, "dur": 10_000.0, "args": {}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
             "tid": pid, "ts": t + 10, "dur": 5, "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 20,
             "dur": 5000, "args": {"device": 0, "stream": 7, "correlation": i + 1}},
        ]
    doc: dict[str, Any] = {
        "schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000 * S + int(start_s * S),
        "deviceProperties": [{"id": 0, "name": gpu, "computeMajor": 9, "computeMinor": 0,
                              "numSms": 132}],
        "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": world or 2, "backend": "nccl"}
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _profile(logdir: Path, run: str = "resnet") -> Path:
    return logdir / "plugins" / "profile" / run


def test_a_tensorboard_log_folder_is_searched(tmp_path: Path) -> None:
    # torch.profiler.tensorboard_trace_handler("logdir/...") on two ranks, one cycle each
    prof = _profile(tmp_path / "logdir")
    _trace(prof / "host_101.1700000000123.pt.trace.json.gz", pid=101, rank=0)
    _trace(prof / "host_102.1700000000125.pt.trace.json.gz", pid=102, rank=1)
    (tmp_path / "logdir" / "events.out.tfevents.1700000000.host").write_bytes(b"\0")
    run = Run(import_traces([tmp_path / "logdir"], tmp_path / "run"))
    assert run.ranks == (0, 1)
    assert not [d for d in run.manifest.diagnostics if d.code == "mixed_jobs"]


def test_hidden_folders_are_not_searched(tmp_path: Path) -> None:
    _trace(tmp_path / "in" / "rank0.json", rank=0)
    _trace(tmp_path / "in" / ".cache" / "old.json", pid=99, rank=1)
    run = Run(import_traces([tmp_path / "in"], tmp_path / "run"))
    assert run.ranks == (0,)


def test_the_last_profiler_cycle_of_each_worker_is_taken_from_a_folder(tmp_path: Path) -> None:
    # schedule(wait=1, warmup=1, active=3, repeat=3) on two workers: three files each, minutes
    # apart; the folder imports as the last cycle of each worker, and the run names the others
    prof = _profile(tmp_path / "logdir")
    for i, ms in enumerate((1700000000000, 1700000300000, 1700000600000)):
        _trace(prof / f"w0.{ms}.pt.trace.json.gz", pid=100, rank=0, world=2, start_s=300 * i)
        _trace(prof / f"w1.{ms + 7}.pt.trace.json.gz", pid=101, rank=1, world=2, start_s=300 * i)
    run = Run(import_traces([tmp_path / "logdir"], tmp_path / "run"))
    assert run.ranks == (0, 1)
    assert sorted(Path(r.file).name for r in run.manifest.ranks) == [
        "w0.1700000600000.pt.trace.json.gz", "w1.1700000600007.pt.trace.json.gz"]
    warned = [d for d in run.manifest.diagnostics if d.code == "profiler_cycles"]
    assert len(warned) == 2 and warned[0].level == "warning"
    assert warned[0].message.startswith("3 profiler cycles of one worker (w0): imported the last, "
                                        "w0.1700000600000.pt.trace.json.gz; left: "
                                        "w0.1700000000000.pt.trace.json.gz, "
                                        "w0.1700000300000.pt.trace.json.gz")
    assert not [d for d in run.manifest.diagnostics if d.code == "mixed_jobs"]


def test_two_cycles_named_explicitly_are_refused(tmp_path: Path) -> None:
    prof = _profile(tmp_path / "logdir")
    a = _trace(prof / "worker0.1700000000000.pt.trace.json.gz")
    b = _trace(prof / "worker0.1700000600000.pt.trace.json.gz", start_s=600)
    with pytest.raises(TraceFormatError, match=r"2 profiler cycles of one worker \(worker0\)"):
        import_traces([a, b], tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # one cycle at a time is one run with one rank
    run = Run(import_traces([b], tmp_path / "run"))
    assert run.ranks == (0,)


def test_cycles_are_refused_at_the_command_line_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = _profile(tmp_path / "logdir")
    files = [str(_trace(prof / f"worker0.{ms}.pt.trace.json.gz", rank=0, world=1))
             for ms in (1700000000000, 1700000600000)]
    assert main(["import", *files, "-o", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "import one cycle at a time" in err


def test_cycles_under_other_names_are_told_by_their_process(tmp_path: Path) -> None:
    # export_chrome_trace names chosen by the user: one pid, windows that do not overlap
    a = _trace(tmp_path / "in" / "first.json", pid=4242)
    b = _trace(tmp_path / "in" / "second.json", pid=4242, start_s=300)
    with pytest.raises(TraceFormatError, match=r"profiler cycles of one worker \(process 4242\)"):
        import_traces([a, b], tmp_path / "run")


def test_several_tensorboard_runs_are_refused(tmp_path: Path) -> None:
    _trace(_profile(tmp_path / "logdir", "baseline") / "w.1700000000000.pt.trace.json.gz",
           rank=0, world=1)
    _trace(_profile(tmp_path / "logdir", "fixed") / "w.1700000900000.pt.trace.json.gz",
           rank=0, world=1, start_s=900)
    with pytest.raises(TraceFormatError, match=r"2 TensorBoard runs \(baseline, fixed\)"):
        import_traces([tmp_path / "logdir"], tmp_path / "run")


@pytest.mark.parametrize("case", ["world_size", "gpu", "far_apart"])
def test_ranks_of_different_jobs_are_warned_about(tmp_path: Path, case: str) -> None:
    a = _trace(tmp_path / "a.json", pid=1, rank=0, world=2)
    b = _trace(tmp_path / "b.json", pid=2, rank=1,
               world=8 if case == "world_size" else 2,
               gpu="NVIDIA A100-SXM4-80GB" if case == "gpu" else "NVIDIA H100 80GB HBM3",
               start_s=3600 if case == "far_apart" else 0.002)
    run = Run(import_traces([a, b], tmp_path / "run"))
    (d,) = [d for d in run.manifest.diagnostics if d.code == "mixed_jobs"]
    assert d.level == "warning" and "ranks of different jobs" in d.message
    said = {"world_size": "world sizes 2, 8", "gpu": "A100", "far_apart": "s apart"}[case]
    assert said in d.message


def test_a_run_written_next_to_its_traces_is_not_searched(tmp_path: Path) -> None:
    # stepscope import traces -o traces/run, then again with --force: the run's manifest and
    # reports are JSON but not traces, and are not read (no skipped_file warning)
    _trace(tmp_path / "traces" / "rank0.json", rank=0)
    import_traces([tmp_path / "traces"], tmp_path / "traces" / "run")
    (tmp_path / "traces" / "run" / "report.json").write_text("{}")
    run = Run(import_traces([tmp_path / "traces"], tmp_path / "traces" / "run", overwrite=True))
    assert run.ranks == (0,)
    assert not [d for d in run.manifest.diagnostics if d.code == "skipped_file"]
