"""A run is checked when it is opened (issue 19): a manifest whose rank is null, "zero" or out of
range, a table file deleted, swapped, renamed or added, a row count that does not match. Each is
one ``RunError`` line, never a report of wrong numbers."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stepscope.errors import RunError
from stepscope.importers import import_traces
from stepscope.store import Run

CNN = Path(__file__).parent.parent / "data" / "cnn_fp32_sync.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_traces([CNN], tmp_path_factory.mktemp("runs") / "cnn")


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "run"))


def manifest(change: Callable[[dict[str, Any]], object]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        change(m)
        (run / "manifest.json").write_text(json.dumps(m))
    return damage


def swap(a: Path, b: Path) -> None:
    tmp = a.with_name("x")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


def test_an_intact_run_opens(run: Path) -> None:
    assert Run(run).ranks == (0,)


@pytest.mark.parametrize(("damage", "said"), [
    (manifest(lambda m: m["ranks"][0].update(rank=None)), "rank is None, not an integer"),
    (manifest(lambda m: m["ranks"][0].update(rank="zero")), "rank is 'zero', not an integer"),
    (manifest(lambda m: m["ranks"][0].update(rank="0")), "rank is '0', not an integer"),
    (manifest(lambda m: m["ranks"][0].update(rank=1.5)), "not an integer"),
    (manifest(lambda m: m["ranks"][0].update(rank=True)), "not an integer"),
    (manifest(lambda m: m["ranks"][0].update(rank=-1)), "rank -1 is out of range"),
    (manifest(lambda m: m["ranks"][0].update(rank=2**70)), "out of range"),
    (manifest(lambda m: m.update(ranks=m["ranks"] * 2)), "rank 0 is listed twice"),
    (manifest(lambda m: m.update(ranks=[])), "rank-0.parquet: a file for rank 0"),
    (manifest(lambda m: m.update(tables=[1])), "'tables' is not an object"),
    (manifest(lambda m: m["tables"].update(kernels=5)), "288 rows, but the manifest counts 5"),
    (manifest(lambda m: m["tables"].update(kernels="288")), "not an integer"),
    (manifest(lambda m: m.update(clock_offset_ns=10**30)), "clock_offset_ns"),
    (lambda r: (r / "manifest.json").write_bytes(b'{"a": "\xff"}'), "not UTF-8"),
    (lambda r: (r / "manifest.json").write_bytes(b'{"a": ' + b"[" * 50_000 + b"]" * 50_000
                                                 + b"}"), "nested too deeply"),
    (lambda r: (r / "kernels" / "rank-0.parquet").unlink(), "kernels: 0 rows, but the manifest"),
    (lambda r: shutil.rmtree(r / "kernels"), "kernels: missing, but the manifest counts 288"),
    (lambda r: (shutil.rmtree(r / "kernels"), (r / "kernels").write_text("")),
     "not a folder of table files"),
    (lambda r: swap(r / "kernels" / "rank-0.parquet", r / "cpu_ops" / "rank-0.parquet"),
     "kernels/rank-0.parquet: not a kernels table (no column"),
    (lambda r: os.replace(r / "kernels" / "rank-0.parquet", r / "kernels" / "rank-3.parquet"),
     "a file for rank 3"),
    (lambda r: shutil.copy(r / "kernels" / "rank-0.parquet", r / "kernels" / "rank-1.parquet"),
     "a file for rank 1"),
    (lambda r: (r / "kernels" / "rank-0.parquet").write_bytes(b"PAR1"), "cannot read table"),
])
def test_a_damaged_run_is_one_line_at_open(run: Path, damage: Callable[[Path], object],
                                           said: str) -> None:
    damage(run)
    with pytest.raises(RunError) as err:
        Run(run)
    msg = str(err.value)
    assert said in msg and "\n" not in msg and str(run) in msg, msg


def test_a_flipped_byte_in_a_table_is_an_error_not_other_numbers(run: Path) -> None:
    """Pages carry CRC32 checksums (writer) that reading verifies: without them, 35 of 152 flips
    of this file read back as different numbers with no error."""
    f = run / "kernels" / "rank-0.parquet"
    blob = f.read_bytes()
    intact = Run(run).table("kernels")
    silent = []
    for at in range(0, len(blob), max(1, len(blob) // 150)):
        damaged = bytearray(blob)
        damaged[at] ^= 0x41
        f.write_bytes(bytes(damaged))
        try:
            if not Run(run).table("kernels").equals(intact):
                silent.append(at)
        except RunError:
            pass
    assert len(silent) <= 2, silent  # the footer's own bytes are not checksummed
