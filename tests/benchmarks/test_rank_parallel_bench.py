"""benchmarks/rank_parallel.py: the rank set it makes (ranks rewritten per copy) and one small
round end to end (serial vs 2 workers, the runs compared byte for byte by the script)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
DATA = Path(__file__).resolve().parents[1] / "data"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import rank_parallel


def test_the_rank_set_is_real_traces_with_their_ranks_rewritten(tmp_path: Path) -> None:
    size = rank_parallel.make_ranks(DATA, tmp_path, 4)
    docs = [json.loads(gzip.decompress(p.read_bytes()))
            for p in sorted(tmp_path.iterdir(), key=lambda p: int(p.name.split(".")[0][5:]))]
    assert [d["distributedInfo"]["rank"] for d in docs] == [0, 1, 2, 3]
    assert {d["distributedInfo"]["world_size"] for d in docs} == {4}
    nccl = json.loads(gzip.decompress((DATA / rank_parallel.TEMPLATES[2]).read_bytes()))
    assert docs[2]["traceEvents"] == nccl["traceEvents"]  # a copy, only its rank changed
    assert docs[3]["traceEvents"] == docs[0]["traceEvents"]
    assert size == sum(len(gzip.decompress(p.read_bytes())) for p in tmp_path.iterdir())


def test_a_small_round_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert rank_parallel.main(["--ranks", "3", "--repeats", "1", "--workers", "1,2",
                               "--engines", "process", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| process, 1 worker |" in table and "| process, 2 workers |" in table
    got = json.loads(out.read_text())
    assert got["ranks"] == 3 and len(got["runs"]["process, 2 workers"]) == 1
    # the report phase: serial against 2 workers (the JSON reports compared by the script)
    assert "| report, 1 worker |" in table and "| report, 2 workers |" in table
    assert len(got["reports"]["report, 2 workers"]) == 1
