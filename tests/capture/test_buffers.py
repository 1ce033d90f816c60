"""Bounded table buffers: drop accounting, columns of a drain."""

from __future__ import annotations

from stepscope.capture.buffers import TableBuffers
from stepscope.schema import spec


def test_push_many_beyond_the_cap_counts_what_was_dropped() -> None:
    b = TableBuffers(("threads", "processes"), cap=3)
    b.push("threads", (1, 10, "main"))
    b.push_many("threads", [(1, 11, "a"), (1, 12, "b"), (1, 13, "c")])  # one too many
    b.push_many("threads", [(1, 14, "d")] * 5)  # more than the cap at once
    (d,) = b.diagnostics()
    assert d.code == "host_buffer_full" and d.count == 1 + 5 and d.message.startswith("threads:")
    data = b.drain(rank=2)
    assert tuple(data["threads"]) == spec("threads").column_names
    assert data["threads"]["tid"] == [14, 14, 14] and data["threads"]["rank"] == [2, 2, 2]
    assert data["processes"]["pid"] == []
    assert b.drain(rank=2)["threads"]["tid"] == []  # a drain empties
