"""A missing optional compiled part is said once, in one ``stepscope: note:`` line, with what it
costs: the Kineto scanner (``import``) and the CUPTI shim (``record`` where CUPTI is found)."""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import pytest

from stepscope.capture.cupti import native as cupti_native
from stepscope.cli.main import main
from stepscope.errors import MissingExtensionWarning
from stepscope.importers import import_traces
from stepscope.importers.kineto import native as kineto_native

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "h200_tiny_h2d.pt.trace.json.gz"
RANKS = [DATA / "trace_filter_sampled_rank-0.json.gz", DATA / "trace_filter_sampled_rank-1.json.gz"]


def notes(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("stepscope: note:")]


@pytest.fixture
def no_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_native, "EXTENSION", None)
    monkeypatch.delenv("STEPSCOPE_KINETO_NATIVE", raising=False)


def test_missing_notice_only_when_the_scanner_would_have_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPSCOPE_KINETO_NATIVE", raising=False)
    monkeypatch.setattr(kineto_native, "EXTENSION", object())
    assert kineto_native.missing_notice() is None
    monkeypatch.setattr(kineto_native, "EXTENSION", None)
    assert kineto_native.missing_notice() == kineto_native.MISSING
    assert "~1.5-1.6x the CPU time" in kineto_native.MISSING
    monkeypatch.setenv("STEPSCOPE_KINETO_NATIVE", "0")  # turned off by the user: nothing to say
    assert kineto_native.missing_notice() is None


@pytest.mark.usefixtures("no_scanner")
def test_import_says_it_in_one_line_once(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", *map(str, RANKS), "-o", str(tmp_path / "run"), "--workers", "1"]) == 0
    said = notes(capsys.readouterr().err)
    assert said == [f"stepscope: note: {kineto_native.MISSING}"]


@pytest.mark.usefixtures("no_scanner")
def test_the_warning_comes_once_per_process(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default action for a UserWarning
        import_traces([TRACE], tmp_path / "a")
        import_traces([TRACE], tmp_path / "b")
    got = [w for w in caught if issubclass(w.category, MissingExtensionWarning)]
    assert len(got) == 1


def test_import_with_the_scanner_says_nothing(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_native, "EXTENSION", object())  # as if built (small: unused)
    assert main(["import", str(TRACE), "-o", str(tmp_path / "run")]) == 0
    assert notes(capsys.readouterr().err) == []


def test_shim_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "CC": "cc"}
    monkeypatch.setattr(cupti_native, "_prebuilt", lambda: None)
    monkeypatch.setattr(cupti_native, "find_libcupti", lambda environ=None: None)
    assert cupti_native.shim_notice(env) is None  # no CUPTI here: no GPU capture to make
    monkeypatch.setattr(cupti_native, "find_libcupti", lambda environ=None: "/x/libcupti.so")
    said = cupti_native.shim_notice(env)
    assert said is not None and "the first GPU capture compiles it" in said
    monkeypatch.setattr(shutil, "which", lambda name: None)
    said = cupti_native.shim_notice({"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert said is not None and "no C compiler was found" in said
    # built into the cache by an earlier capture: nothing to say
    digest = cupti_native.hashlib.sha256(cupti_native.SHIM_SOURCE.read_bytes()).hexdigest()[:16]
    (tmp_path / "cache" / "stepscope").mkdir(parents=True)
    (tmp_path / "cache" / "stepscope" / f"libss_cupti-{digest}.so").write_bytes(b"")
    assert cupti_native.shim_notice(env) is None
    monkeypatch.setattr(cupti_native, "_prebuilt", lambda: tmp_path / "_ss_cupti.so")
    assert cupti_native.shim_notice(env) is None


def test_record_says_it_for_the_shim(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupti_native, "shim_notice", lambda environ=None: "the shim: test")
    assert main(["record", "-o", str(tmp_path / "run"), "--quiet", "--",
                 sys.executable, "-c", "pass"]) == 0
    assert notes(capfd.readouterr().err) == ["stepscope: note: the shim: test"]
    assert main(["record", "-o", str(tmp_path / "run2"), "--quiet", "--backend", "none", "--",
                 sys.executable, "-c", "pass"]) == 0
    assert notes(capfd.readouterr().err) == []
