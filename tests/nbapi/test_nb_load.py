"""stepscope.load: what it opens, where it writes, what it never overwrites."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

import stepscope
from stepscope.errors import StepscopeError
from stepscope.notebook import Profile, sources

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"


def _trace(folder: Path, name: str = "cnn.pt.trace.json.gz") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(CNN, folder / name)
    return folder / name


def test_a_trace_is_imported_beside_it_and_reused(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    p = stepscope.load(trace)
    assert isinstance(p, Profile) and p.path == tmp_path / "cnn.stepscope"
    assert p.opened.how == "imported" and str(p.path) in p.note and str(trace) in p.note
    again = stepscope.load(trace)  # the cell run again: the same import, not a second one
    assert again.path == p.path and again.opened.how == "reused"
    assert stepscope.load(p.path).opened.how == "opened"


def test_never_overwrites(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    p = stepscope.load(trace)
    later = p.path.stat().st_mtime + 100
    os.utime(trace, (later, later))  # the trace changed after the import
    with pytest.raises(StepscopeError, match="overwrite=True"):
        stepscope.load(trace)
    assert stepscope.load(trace, overwrite=True).opened.how == "imported"
    mine = tmp_path / "mine.stepscope"  # the user's own folder where the run would go
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    t2 = _trace(tmp_path, "mine.pt.trace.json.gz")
    with pytest.raises(StepscopeError):
        stepscope.load(t2)
    with pytest.raises(StepscopeError):
        stepscope.load(t2, overwrite=True)  # overwrite replaces only a stepscope run
    assert (mine / "notes.txt").read_text() == "keep me"
    with pytest.raises(StepscopeError):
        stepscope.load(tmp_path / "missing.json")


def test_out_and_a_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path / "ro")
    p = stepscope.load(trace, out=tmp_path / "x")
    assert p.path == tmp_path / "x"
    assert stepscope.load(trace, out=tmp_path / "x").opened.how == "reused"  # the cell again
    real = os.access
    monkeypatch.setattr(sources.os, "access",
                        lambda path, mode: False if Path(path) == trace.parent else real(path, mode))
    t = stepscope.load(trace)
    assert t.opened.how == "imported (temporary)" and trace.parent not in t.path.parents
    assert t.path.name == "cnn.stepscope" and "temporary" in t.note
    assert not (trace.parent / "cnn.stepscope").exists()
    shutil.rmtree(t.path.parent)


def test_folders_of_ranks_and_tensorboard_logs(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        name = f"trace_filter_sampled_rank-{r}.json.gz"
        shutil.copy(DATA / name, ranks / name)
    p = stepscope.load(ranks)
    assert p.path == tmp_path / "ranks.stepscope" and p.ranks == (0, 1)
    assert set(p.steps().column("rank").to_pylist()) == {0, 1}
    log = tmp_path / "log"
    _trace(log / "plugins" / "profile" / "run1", "host_1.1732640000000.pt.trace.json.gz")
    tb = stepscope.load(log)
    assert tb.path == tmp_path / "log.stepscope" and tb.ranks == (0,)
    assert tb.kernels().num_rows > 0


def test_other_formats(tmp_path: Path) -> None:
    for rel, run_name in (("xspace/jax_mlp.xplane.pb", "jax_mlp.xplane.pb.stepscope"),
                          ("nsys/saxpy_mpi_a100.sqlite.gz", "saxpy_mpi_a100.stepscope"),
                          ("ncu/gemm.raw.csv", "gemm.raw.stepscope")):
        shutil.copy(DATA / rel, tmp_path / Path(rel).name)
        p = stepscope.load(tmp_path / Path(rel).name)
        assert p.path == tmp_path / run_name, rel
    assert stepscope.load(tmp_path / "jax_mlp.xplane.pb").kernels().num_rows > 0
    assert stepscope.load(tmp_path / "gemm.raw.csv").run.table("kernel_metrics").num_rows > 0


def test_a_bad_file_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(StepscopeError) as err:
        stepscope.load(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_the_face_takes_profiles(tmp_path: Path) -> None:
    p = stepscope.load(_trace(tmp_path))
    rep = stepscope.analyze(p)
    assert rep.run_path == p.path
    assert stepscope.report(p, "json") == p.report("json")
    assert stepscope.diff(p, p).step.n_base > 0


def test_the_hand_off_and_notebook_modules_load_on_first_use() -> None:
    import subprocess
    import sys

    code = ("import sys, stepscope; assert 'stepscope.torch' not in sys.modules; "
            "assert callable(stepscope.torch.on_trace_ready); "
            "assert callable(stepscope.notebook.verdict); "
            "assert 'torch' not in sys.modules  # torch itself: only when profile() runs")
    env = {"PYTHONPATH": str(Path(__file__).parent.parent.parent / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, **env})
    assert done.returncode == 0, done.stderr
