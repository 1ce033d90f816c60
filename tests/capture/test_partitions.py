"""How a partition's ending is settled by the launcher's status of its own child."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.capture.partitions import Partition, ended_by, settle_launched
from stepscope.capture.staging import PartitionMeta


def part(pid: int, start: int, ended: str, host: str = "h") -> Partition:
    return Partition(path=Path(f"p{start}-{pid}"),
                     meta=PartitionMeta(pid=pid, start_ns=start, host=host, ended=ended))


def test_ended_by() -> None:
    assert ended_by(0) == "exit" and ended_by(3) == "exit status 3"
    assert ended_by(-15) == "signal: SIGTERM" and ended_by(-200) == "signal: 200"


@pytest.mark.parametrize(("ended", "code", "settled"), [
    ("exit", 3, "exit status 3"),  # raise SystemExit(3): not seen in the process
    ("exit status 3", 0, "exit"),  # a sys.exit(3) the program caught
    ("running", -9, "signal: SIGKILL"),
    ("unknown", 4, "exit status 4"),
    ("exception: ValueError", 1, "exception: ValueError"),  # what the process saw says more
    ("signal: SIGTERM", -15, "signal: SIGTERM"),
])
def test_the_launched_process_takes_the_launchers_status(ended: str, code: int, settled: str) -> None:
    parts = [part(10, 1, ended), part(11, 2, "exit")]
    out = settle_launched(parts, 10, code, "h")
    assert [p.meta.ended for p in out] == [settled, "exit"]


def test_only_the_last_image_of_an_exec_and_only_on_this_host() -> None:
    parts = [part(10, 1, "running"), part(10, 5, "exit"), part(10, 3, "exit", host="other")]
    out = settle_launched(parts, 10, 2, "h")
    assert [p.meta.ended for p in out] == ["running", "exit status 2", "exit"]
    assert settle_launched(parts, 99, 2, "h") == parts  # the child was not a Python program
