"""``stepscope completion bash|zsh|fish``: a shell completion script, made from the parser.

Written here from argparse's own description of the commands (``main.parser(full=True)``) rather
than with a completion package: the three scripts are small, stepscope's options change with
each release and the script follows them, and no dependency is needed at run time. What is
completed: the commands, each command's options, the values of options with a fixed set of
choices (``--format``, ``--backend`` ...), files for the other option values and arguments, and,
after ``--`` of ``record`` and ``kernels``, the program's own command line as the shell would.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any

from stepscope.cli.verbs import add_verb

SHELLS = ("bash", "zsh", "fish")
# option values completed as files: by the option's metavar, else its name
PATH_METAVARS = ("RUN", "FILE", "PATH", "DIR")
PATH_DESTS = ("output", "into", "ncu", "base", "new")


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]  # e.g. ("-o", "--output")
    help: str  # short: the first clause of argparse's help
    takes_value: bool
    choices: tuple[str, ...]  # the values, when fixed
    path: bool  # the value is a file or folder (else a number, a name ...: not completed)


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    options: tuple[Option, ...]
    program: bool  # takes "-- CMD ARGS" (argparse.REMAINDER)
    words: tuple[str, ...]  # the values of its argument when fixed (completion's shells)


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "completion")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.cli.main import parser  # main imports this module only to run it

    sys.stdout.write(script(args.shell, parser(full=True)))
    return 0


def script(shell: str, p: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` of the command line ``p``."""
    top, commands = describe(p)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](top, commands)


def describe(p: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Command, ...]]:
    """The top-level options and every command with its options."""
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {a.dest: a.help or "" for a in sub._choices_actions}
    commands = tuple(Command(name, summaries.get(name, ""), _options(cp),
                             any(a.nargs == argparse.REMAINDER for a in cp._actions),
                             tuple(str(c) for a in cp._actions
                                   if not a.option_strings and a.choices for c in a.choices))
                     for name, cp in sub.choices.items())
    return _options(p), commands


def _options(p: argparse.ArgumentParser) -> tuple[Option, ...]:
    return tuple(Option(tuple(a.option_strings), _short(a.help), a.nargs != 0,
                        tuple(map(str, a.choices or ())),
                        a.nargs != 0 and (a.metavar in PATH_METAVARS or a.dest in PATH_DESTS))
                 for a in p._actions
                 if a.option_strings and a.help != argparse.SUPPRESS)


def _short(text: str | None) -> str:
    """The help's first clause, without argparse's %-escapes, on one line, at most 60 chars."""
    t = " ".join((text or "").replace("%%", "%").split())
    t = re.split(r"(?<=[^(]{12})[:;(]|\. ", t, maxsplit=1)[0].strip(" ,")
    return t if len(t) <= 60 else t[:57].rstrip() + "..."


# bash: one function; the command is the first word that is not an option (the top-level
# options take no value); `complete -o default` leaves files to readline when nothing is offered

def _bash(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    cases = []
    for c in commands:
        flags = " ".join(f for o in c.options for f in o.flags)
        valued = "|".join(f for o in c.options if o.takes_value and not o.choices
                          and not o.path for f in o.flags)
        lines = [f"        {c.name})", f'            opts="{flags}"']
        for o in c.options:
            if o.choices:
                lines.append(f'            case "$prev" in {"|".join(o.flags)}) '
                             f'COMPREPLY=($(compgen -W "{" ".join(o.choices)}" -- "$cur")); '
                             "return;; esac")
        if valued:  # a number or a name: nothing to offer (a path: the files, by default)
            lines.append(f'            case "$prev" in {valued}) compopt +o default; '
                         'return;; esac')
        if c.words:
            lines.append(f'            [[ "$cur" != -* ]] && COMPREPLY=($(compgen -W '
                         f'"{" ".join(c.words)}" -- "$cur")) && return')
        if c.program:
            lines.append("            for ((i=cmd_at+1; i<COMP_CWORD; i++)); do "
                         '[[ "${COMP_WORDS[i]}" == -- ]] && return; done')
        lines.append("            ;;")
        cases.append("\n".join(lines))
    names = " ".join(c.name for c in commands)
    top_flags = " ".join(f for o in top for f in o.flags)
    return f"""# bash completion for stepscope (stepscope completion bash)
_stepscope() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmd="" cmd_at=0 opts="" i
    for ((i=1; i<COMP_CWORD; i++)); do
        if [[ "${{COMP_WORDS[i]}}" != -* ]]; then cmd="${{COMP_WORDS[i]}}"; cmd_at=$i; break; fi
    done
    COMPREPLY=()
    case "$cmd" in
        "")
            COMPREPLY=($(compgen -W "{names} {top_flags}" -- "$cur"))
            return;;
{chr(10).join(cases)}
        *) return;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    fi
}}
complete -o bashdefault -o default -F _stepscope stepscope
"""


# zsh: _arguments per command

def _zsh_text(text: str) -> str:
    """Help text inside a single-quoted _arguments spec: brackets and colons escaped."""
    text = text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace(":", "\\:")
    return text.replace("'", "'\\''")


def _zsh_option(o: Option) -> list[str]:
    action = ""
    if o.takes_value:
        value = f"({' '.join(o.choices)})" if o.choices else "_files" if o.path else " "
        action = f":{o.flags[-1].lstrip('-')}:{value}"
    excl = f"({' '.join(o.flags)})" if len(o.flags) > 1 else ""
    return [f"'{excl}{f}[{_zsh_text(o.help)}]{action}'" for f in o.flags]


def _zsh(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    described = "\n".join(f"        '{c.name}:{_zsh_text(c.summary)}'" for c in commands)
    cases = []
    for c in commands:
        specs = [s for o in c.options for s in _zsh_option(o)]
        specs.append("'*::program:_normal'" if c.program
                     else f"'1:{c.name}:({' '.join(c.words)})'" if c.words else "'*:file:_files'")
        body = " \\\n                ".join(specs)
        cases.append(f"            {c.name})\n                _arguments -s {body}\n"
                     "                ;;")
    top_specs = " \\\n        ".join(s for o in top for s in _zsh_option(o))
    return f"""#compdef stepscope
# zsh completion for stepscope (stepscope completion zsh)
_stepscope() {{
    local -a commands
    local state line
    commands=(
{described}
    )
    _arguments -C {top_specs} \\
        '1:command:->command' '*::argument:->argument'
    case $state in
        command) _describe -t commands 'stepscope command' commands ;;
        argument)
            case $line[1] in
{chr(10).join(cases)}
            esac
            ;;
    esac
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _stepscope "$@"
else
    compdef _stepscope stepscope
fi
"""


# fish: one `complete` line per command and option

def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    lines = ["# fish completion for stepscope (stepscope completion fish)",
             "complete -c stepscope -f"]
    names = " ".join(c.name for c in commands)
    for o in top:
        lines.append(f"complete -c stepscope -n 'not __fish_seen_subcommand_from {names}' "
                     f"{_fish_flags(o)}")
    for c in commands:
        lines.append(f"complete -c stepscope -n 'not __fish_seen_subcommand_from {names}' "
                     f"-a {c.name} -d {_fish_text(c.summary)}")
    for c in commands:
        when = f"-n '__fish_seen_subcommand_from {c.name}'"
        for o in c.options:
            lines.append(f"complete -c stepscope {when} {_fish_flags(o)}")
        if c.words:
            lines.append(f"complete -c stepscope {when} -a {_fish_text(' '.join(c.words))}")
        else:
            lines.append(f"complete -c stepscope {when} -F")  # the arguments: files
    return "\n".join(lines) + "\n"


def _fish_flags(o: Option) -> str:
    parts = []
    for f in o.flags:
        parts.append(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}")
    if o.choices:
        parts.append(f"-x -a {_fish_text(' '.join(o.choices))}")
    elif o.path:
        parts.append("-r -F")
    elif o.takes_value:
        parts.append("-x")
    parts.append(f"-d {_fish_text(o.help)}")
    return " ".join(parts)
