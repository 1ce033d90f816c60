"""Start-up cost of the command line: only the command being run is imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import stepscope
from stepscope.cli.main import VERBS, main


def _run(code: str) -> str:
    # the sources under test, not whichever stepscope the interpreter has installed
    src = str(Path(stepscope.__file__).parent.parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src})
    return out.stdout.strip()


def test_import_stepscope_is_light_and_the_api_still_works() -> None:
    assert _run("import sys, stepscope; print(sorted({'numpy', 'pyarrow', 'stepscope.recording'}"
                " & set(sys.modules)))") == "[]"
    assert _run("from stepscope import Recording, record, step; import stepscope;"
                "print(stepscope.record is record, callable(step), Recording.__name__)") \
        == "True True Recording"
    with pytest.raises(AttributeError):
        import stepscope
        stepscope.no_such_thing  # noqa: B018


def test_a_command_imports_only_its_own_module() -> None:
    code = ("import sys; from stepscope.cli.main import main; main(['import', '--help']);"
            "import os; print(sorted(m for m in sys.modules if m.startswith('stepscope.cli.')),"
            " 'OPENBLAS_NUM_THREADS' in os.environ, 'numpy' in sys.modules)")
    # cli.progress: the terminal bar every verb shares (rich itself is imported only to draw)
    assert _run(code).splitlines()[-1] == "['stepscope.cli.import_', 'stepscope.cli.main', " \
                                          "'stepscope.cli.progress'] False True"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"    {verb} " in out for verb in VERBS)
    assert main(["--debug", "nonsense"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_version_loads_no_command_and_no_numpy() -> None:
    code = ("import sys; from stepscope.cli.main import main; code = main(['--version']);"
            "print(code, sorted(m for m in sys.modules if m.startswith('stepscope.cli.')),"
            " 'numpy' in sys.modules)")
    out = _run(code).splitlines()
    assert out[0].startswith("stepscope ")
    assert out[-1] == "0 ['stepscope.cli.main'] False"
