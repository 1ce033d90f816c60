"""stepscope completion bash|zsh|fish: scripts made from the parser, which complete."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from stepscope.cli.completion import SHELLS, describe, script
from stepscope.cli.main import VERBS, main, parser


def test_every_command_and_option_is_in_every_script(capsys: pytest.CaptureFixture[str]) -> None:
    top, commands = describe(parser(full=True))
    assert [c.name for c in commands] == list(VERBS)
    report = next(c for c in commands if c.name == "report")
    fmt = next(o for o in report.options if "--format" in o.flags)
    assert "json" in fmt.choices and fmt.takes_value
    for shell in SHELLS:
        assert main(["completion", shell]) == 0
        out = capsys.readouterr().out
        assert out == script(shell, parser(full=True))
        for c in commands:
            assert c.name in out
            for o in c.options:
                assert all(f in out or f"-l {f[2:]}" in out or f"-s {f[1:]}" in out
                           for f in o.flags), (shell, c.name, o.flags)
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def _bash_complete(words: list[str]) -> list[str]:
    """What the bash script offers for the command line ``words`` (the last one being typed)."""
    code = (script("bash", parser(full=True))
            + f"\nCOMP_WORDS=({' '.join(map(repr, words))}); COMP_CWORD={len(words) - 1}; "
            "_stepscope; printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_options_and_choices() -> None:
    assert _bash_complete(["stepscope", "rep"]) == ["report"]
    assert _bash_complete(["stepscope", "--debug", "d"]) == ["demo", "diff"]
    assert _bash_complete(["stepscope", "report", "run", "--fo"]) == ["--format"]
    assert _bash_complete(["stepscope", "report", "--format", "j"]) == ["json"]
    assert set(_bash_complete(["stepscope", "record", "--backend", ""])) == {
        "auto", "cupti", "cupti-python", "torch", "none"}
    # after `--` the program's command line is the shell's own business
    assert _bash_complete(["stepscope", "record", "--", "python", "--"]) == []
    assert _bash_complete(["stepscope", "record", "--qu"]) == ["--quiet"]
    assert _bash_complete(["stepscope", "completion", "z"]) == ["zsh"]


@pytest.mark.parametrize("shell", [s for s in SHELLS if shutil.which(s)])
def test_the_scripts_parse(shell: str) -> None:
    text = script(shell, parser(full=True))
    flag = {"bash": "-n", "zsh": "-n", "fish": "--no-execute"}[shell]
    subprocess.run([shell, flag], input=text, text=True, check=True)


def test_help_texts_are_quoted_for_each_shell() -> None:
    from stepscope.cli.completion import _fish_text, _zsh_text

    assert _zsh_text("a [b]: c's") == "a \\[b\\]\\: c'\\''s"
    assert _fish_text("it's a \\ b") == "'it\\'s a \\\\ b'"


def test_the_script_is_printed_without_numpy() -> None:
    import os
    import sys
    from pathlib import Path

    import stepscope

    code = ("import sys; from stepscope.cli.main import main; main(['completion', 'bash']);"
            "print('numpy' in sys.modules, 'pyarrow' in sys.modules)")
    src = str(Path(stepscope.__file__).parent.parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": src}).stdout
    assert out.splitlines()[-1] == "False False" and "complete -o bashdefault" in out
