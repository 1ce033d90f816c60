"""``store.output``: report and export files are written atomically, with the umask's mode,
through a symbolic link (the link stays), in place for a device; never half a file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

import pytest

from stepscope.errors import StepscopeError
from stepscope.store.output import write_output, write_text_output


@pytest.fixture
def umask_002() -> object:
    old = os.umask(0o002)
    yield
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_file_gets_the_umask_mode(tmp_path: Path, umask_002: object) -> None:
    out = write_text_output(tmp_path / "r.json", "{}")
    assert out.read_text() == "{}" and mode(out) == 0o664  # mkstemp alone: 0600
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.txt"
    out.write_text("old")
    out.chmod(0o640)
    write_text_output(out, "new")
    assert out.read_text() == "new" and mode(out) == 0o640


def test_a_symlink_is_followed_not_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    write_text_output(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and real.read_text() == "new"


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    out.write_text("old")

    def half(fh: IO[bytes]) -> None:
        fh.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(StepscopeError, match=r"t.json: cannot write \(No space left on device\)"):
        write_output(out, half)
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]


def test_a_device_is_written_in_place(tmp_path: Path) -> None:
    write_text_output("/dev/null", "x")  # no temporary file in /dev, /dev/null stays a device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(StepscopeError, match="/dev/full: cannot write"):
        write_text_output("/dev/full", "x" * 100_000)


def test_a_folder_or_a_missing_parent_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StepscopeError, match="is a folder"):
        write_text_output(tmp_path, "x")
    with pytest.raises(StepscopeError, match="cannot write"):
        write_text_output(tmp_path / "no" / "r.json", "x")
