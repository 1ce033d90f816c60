"""The contract every fuzzed command must keep (issue 19): exit 0 with a result that checks out,
or exit 2 with one line on stderr and no traceback, nothing left behind, nothing outside the
output path touched. Commands run in-process (``cli.main.main``): an exception escaping it is the
traceback a user would have seen."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings

from stepscope.cli.main import main

# derandomize: the same examples on every run (CI is deterministic); deadline off: a 2-core box
# shared with other jobs has slow moments
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def fresh(tmp_path: Path) -> Path:
    """A new empty folder under ``tmp_path`` for one example."""
    d = tmp_path / f"ex{next(_COUNTER)}"
    d.mkdir()
    return d


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            out[rel] = "dir" if p.is_dir() else hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def run_cli(argv: Sequence[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))  # an exception here is a traceback: the test fails with it
    return Outcome(code, out.getvalue(), err.getvalue())


def check(root: Path, argv: Sequence[str], output: str | None = None,
          ok: Callable[[Outcome], None] | None = None) -> Outcome:
    """Run ``argv`` in ``root`` and assert the contract; ``output`` (relative to ``root``) is
    the one path the command may create; ``ok`` checks a successful result."""
    before = snapshot(root)
    res = run_cli(argv)
    after = snapshot(root)
    assert res.code in (0, 2), (res.code, res.err)
    assert "Traceback" not in res.err
    mine = (lambda k: output is not None and (k == output or k.startswith(output + "/")))
    changed = [k for k in before if after.get(k) != before[k]]
    assert not changed, f"touched {changed} (exit {res.code}: {res.err.strip()})"
    if res.code == 2:
        lines = res.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stepscope: error: "), res.err
        assert after == before, f"left {sorted(set(after) - set(before))} behind: {lines[0]}"
    else:
        new = [k for k in after if k not in before and not mine(k)]
        assert not new, f"left {new} behind"
        if ok is not None:
            ok(res)
    return res


def report_json(run: Path) -> dict[str, object]:
    res = run_cli(["report", str(run), "--format", "json"])
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert isinstance(doc, dict)
    return doc
