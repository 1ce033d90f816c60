"""Start-up cost of the command line: only the command being run is imported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import stepscope
from stepscope.cli.main import VERBS, main
from stepscope.cli.verbs import BY_NAME, QUERY_TABLES


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
    # cli.progress: the terminal bar every verb shares (rich itself is imported only to draw);
    # cli.verbs: the commands' summaries and examples; numpy only once the command runs
    assert _run(code).splitlines()[-1] == "['stepscope.cli.import_', 'stepscope.cli.main', " \
                                          "'stepscope.cli.progress', 'stepscope.cli.verbs'] " \
                                          "False False"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^    {verb}\b", out, re.M) for verb in VERBS)
    assert main(["--debug", "nonsense"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_version_loads_no_command_and_no_numpy() -> None:
    code = ("import sys; from stepscope.cli.main import main; code = main(['--version']);"
            "print(code, sorted(m for m in sys.modules if m.startswith('stepscope.cli.')),"
            " 'numpy' in sys.modules)")
    out = _run(code).splitlines()
    assert out[0].startswith("stepscope ")
    assert out[-1] == "0 ['stepscope.cli.main', 'stepscope.cli.verbs'] False"


HEAVY = ("numpy", "pyarrow", "rich", "duckdb", "msgspec", "psutil", "stepscope.store",
         "stepscope.analysis", "stepscope.reporters", "stepscope.importers")


@pytest.mark.parametrize("argv", [["--help"], *([v, "--help"] for v in VERBS)])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    # `stepscope --help` and `stepscope CMD --help` answer in well under 0.1 s: the commands'
    # modules import their layers (numpy, pyarrow, rich, DuckDB ...) only when they run
    code = (f"import sys; from stepscope.cli.main import main; code = main({argv!r});"
            "print(code, sorted({m.split('.')[0] if not m.startswith('stepscope.') else "
            "'.'.join(m.split('.')[:2]) for m in sys.modules} & set(" + repr(HEAVY) + ")))")
    assert _run(code).splitlines()[-1] == "0 []"


def test_the_main_module_imports_nothing_heavy() -> None:
    code = ("import sys, stepscope.cli.main, stepscope.cli.verbs;"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert _run(code) == "[]"


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_command_has_a_description_and_examples(verb: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    usage, description = out.split("\n\n")[:2]
    assert usage.startswith(f"usage: stepscope {verb}")
    assert len(description.split()) >= 10 and not description.startswith(("positional", "options"))
    examples = out.split("\nexamples:\n")[1].splitlines()
    assert len(examples) >= 2 and all(f"stepscope {verb}" in e for e in examples)
    # and the summary in `stepscope --help` is the one the command's parser was given
    assert main(["--help"]) == 0
    assert " ".join(BY_NAME[verb].summary.split()) in " ".join(capsys.readouterr().out.split())


def test_the_query_description_lists_the_schema_tables() -> None:
    from stepscope.schema import TABLE_NAMES

    assert QUERY_TABLES == TABLE_NAMES
