"""A run folder made from a real trace, damaged: manifest fields dropped or of the wrong type,
Parquet files truncated, flipped, deleted, swapped or renamed. ``report``, ``query`` and
``export`` must refuse a damaged run with one line, or give exactly the intact run's result."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.contract import FUZZ, Outcome, check, fresh, run_cli
from fuzz.test_fuzz_traces import ODD
from stepscope.importers import import_traces

DATA = Path(__file__).parent.parent / "data"
TRACE = DATA / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
SQL = "SELECT count(*) AS n, sum(dur_ns) AS d FROM kernels"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    run = import_traces([TRACE], tmp_path_factory.mktemp("fuzz-runs") / "run")
    report = run_cli(["report", str(run), "--format", "json"])
    query = run_cli(["query", str(run), SQL, "--format", "json"])
    assert report.code == 0 and query.code == 0
    return run, strip(report.out, run), query.out


def strip(report: str, run: Path) -> str:
    doc = json.loads(report)
    doc.pop("run", None)  # the run's path differs between copies
    return json.dumps(doc, sort_keys=True).replace(str(run), "RUN")


def parquet_files(run: Path) -> list[Path]:
    return sorted(run.glob("*/rank-*.parquet"))


MANIFEST_KEYS = ["ranks", "tables", "schema_version", "source", "clock_offset_ns", "diagnostics",
                 "partial", "settings"]


def damage_manifest(run: Path, data: st.DataObject) -> None:
    m: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    key = data.draw(st.sampled_from(MANIFEST_KEYS), "key")
    how = data.draw(st.sampled_from(["drop", "odd", "rank", "count"]), "how")
    if how == "drop":
        m.pop(key, None)
    elif how == "rank":
        m["ranks"][0]["rank"] = data.draw(ODD, "rank")
    elif how == "count":
        table = data.draw(st.sampled_from(sorted(m["tables"])), "table")
        m["tables"][table] = data.draw(st.one_of(ODD, st.integers(0, 10**6)), "count")
    else:
        m[key] = data.draw(ODD, "value")
    (run / "manifest.json").write_text(json.dumps(m))


def damage_parquet(run: Path, data: st.DataObject) -> None:
    files = parquet_files(run)
    f = data.draw(st.sampled_from(files), "file")
    how = data.draw(st.sampled_from(["truncate", "flip", "delete", "swap", "rename", "empty"]))
    if how == "truncate":
        blob = f.read_bytes()
        f.write_bytes(blob[: int(len(blob) * data.draw(st.floats(0.0, 0.99), "cut"))])
    elif how == "flip":
        blob = bytearray(f.read_bytes())
        at = data.draw(st.integers(0, len(blob) - 1), "at")
        blob[at] ^= data.draw(st.integers(1, 255), "xor")
        f.write_bytes(bytes(blob))
    elif how == "delete":
        f.unlink()
    elif how == "swap":
        other = data.draw(st.sampled_from([g for g in files if g != f]), "other")
        tmp = f.with_name("swap")
        os.replace(f, tmp)
        os.replace(other, f)
        os.replace(tmp, other)
    elif how == "rename":
        os.replace(f, f.with_name(f"rank-{data.draw(st.integers(1, 9), 'rank')}.parquet"))
    else:
        f.write_bytes(b"")


@FUZZ
@given(data=st.data(), part=st.sampled_from(["manifest", "parquet"]),
       verb=st.sampled_from(["report", "query", "export"]))
def test_damaged_runs(tmp_path: Path, pristine: tuple[Path, str, str], data: st.DataObject,
                      part: str, verb: str) -> None:
    source, report, query = pristine
    root = fresh(tmp_path)
    run = Path(shutil.copytree(source, root / "run"))
    (damage_manifest if part == "manifest" else damage_parquet)(run, data)

    if verb == "report":
        def same_report(res: Outcome) -> None:
            assert strip(res.out, run) == report, "exit 0 with a report unlike the intact run's"
        check(root, ["report", str(run), "--format", "json"], None, same_report)
    elif verb == "query":
        def same_rows(res: Outcome) -> None:
            assert res.out == query, "exit 0 with rows unlike the intact run's"
        check(root, ["query", str(run), SQL, "--format", "json"], None, same_rows)
    else:
        check(root, ["export", str(run), "-o", str(root / "t.json")], "t.json")
