"""``stepscope record -- torchrun ...`` with a real 2-rank DDP (gloo, CPU) job; rank assignment.

The torchrun tests need CPU torch (``pip install torch==2.13.0``); each runs the whole chain
(launcher -> torchrun agent -> 2 workers, all captured) in about 10 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stepscope.capture.partitions import Partition, assign_ranks
from stepscope.capture.staging import PartitionMeta
from stepscope.store.run import Run

SRC = str(Path(__file__).resolve().parents[2] / "src")

DDP = """
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
for i in range(12):
    if rank == fail_rank and i == 9:  # after the window (steps 2-6) has closed
        sys.exit(3)
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # DDP all-reduce over gloo
    opt.step()
    time.sleep(0.01)
dist.destroy_process_group()
os.write(1, f"rank {rank} done\\n".encode())  # one write: torchrun runs workers unbuffered (-u)
"""


def _torchrun() -> str:
    pytest.importorskip("torch")
    path = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if path is None:
        pytest.skip("torch is installed but its torchrun script is not found")
    return path


def record_torchrun(tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    env = {k: v for k, v in os.environ.items() if k not in ("STEPSCOPE_CAPTURE", "RANK", "LOCAL_RANK",
                                                            "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=SRC, OMP_NUM_THREADS="1", **env_extra)
    if "GLOO_SOCKET_IFNAME" not in env and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # containers whose hostname resolves to no interface
    cmd = [sys.executable, "-m", "stepscope", "record", "-o", str(tmp_path / "run"), "--quiet",
           "--steps", "2-6", "--no-stacks", "--", _torchrun(), "--standalone",
           "--nproc_per_node=2", str(script)]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def _check_two_ranks(run: Run) -> None:
    m = run.manifest
    assert [r.rank for r in m.ranks] == [0, 1]
    assert all(r.world_size == 2 for r in m.ranks) and len({r.pid for r in m.ranks}) == 2
    assert m.source.details["processes_captured"] == 3  # torchrun agent + 2 workers
    launcher = [d for d in m.diagnostics if d.code == "launcher_not_a_rank"]
    assert len(launcher) == 1 and "torchrun" in launcher[0].message
    steps = run.query("SELECT rank, count(*) AS n, min(step) AS lo, max(step) AS hi, "
                      "any_value(source) AS source FROM steps GROUP BY rank ORDER BY rank").to_pylist()
    assert steps == [{"rank": r, "n": 5, "lo": 2, "hi": 6, "source": "hook"} for r in (0, 1)]
    for r in (0, 1):
        host = m.settings["ranks"][f"rank{r}"]["host"]
        assert host["samplers"]["steps"]["hook"] == "torch.optim.Optimizer.step"


def test_torchrun_ddp_two_ranks(tmp_path: Path) -> None:
    r = record_torchrun(tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["rank 0 done", "rank 1 done"]
    run = Run(tmp_path / "run")
    assert not run.manifest.partial
    _check_two_ranks(run)
    # the flight recorder (gloo's, torch >= 2.8): DDP's bucket all-reduce of the 9 float
    # parameters (36 B), once in each of the window's 5 steps, the same calls on both ranks
    assert "deprecated" not in r.stderr  # the buffer size stepscope set warns about nothing
    coll = run.query("SELECT rank, count(*) AS n, list(seq ORDER BY seq) AS seq, "
                     "list(DISTINCT op) AS op, list(DISTINCT bytes) AS b, "
                     "list(DISTINCT pg_desc) AS pg, any_value(pg_ranks) AS ranks, "
                     "list(DISTINCT source) AS src FROM collectives GROUP BY rank ORDER BY rank"
                     ).to_pylist()
    assert [{k: v for k, v in c.items() if k not in ("rank", "seq")} for c in coll] == [
        {"n": 5, "op": ["all_reduce"], "b": [36], "pg": ["default_pg"], "ranks": [0, 1],
         "src": ["flight_recorder"]}] * 2
    assert coll[0]["seq"] == coll[1]["seq"] == list(range(coll[0]["seq"][0], coll[0]["seq"][0] + 5))


def test_torchrun_one_rank_failing(tmp_path: Path) -> None:
    r = record_torchrun(tmp_path, FAIL_RANK="1")
    assert r.returncode == 1, r.stderr  # torchrun's status when a worker fails (ChildFailedError)
    assert "exitcode  : 3" in r.stderr  # torchrun's own report names rank 1's status
    run = Run(tmp_path / "run")
    assert not run.manifest.partial  # both windows had closed: a failing rank is not a cut capture
    assert any(d.code == "program_exit_status" and d.message == "the program exited with status 1"
               for d in run.manifest.diagnostics)
    # the failing rank is named with its own status (its sys.exit(3) was noted)
    assert any(d.code == "process_ended" and d.message.startswith("rank 1 ")
               and d.message.endswith("ended by exit status 3") for d in run.manifest.diagnostics)
    _check_two_ranks(run)  # both ranks' windows were flushed before rank 1 exited


# -- rank assignment (no subprocesses) ---------------------------------------------------------

def _part(pid: int, ppid: int = 1, rank: int | None = None, steps: int = 0,
          argv: tuple[str, ...] = ("python",)) -> Partition:
    tables: dict[str, Any] = {}
    if steps:
        tables["steps"] = pa.table({"step": list(range(steps))})
    meta = PartitionMeta(pid=pid, start_ns=pid, ppid=ppid, host="h", env_rank=rank,
                         world_size=None if rank is None else 2, argv=argv)
    return Partition(path=Path(f"p{pid}-{pid}"), meta=meta, tables=tables)


def _ranks(parts: list[Partition]) -> tuple[dict[int, int], set[str]]:
    ranked, diags = assign_ranks(parts)
    return {r: p.meta.pid for r, p in ranked}, {d.code for d in diags}


def test_launcher_is_never_a_rank_even_without_steps() -> None:
    agent = _part(10, argv=("/venv/bin/torchrun", "--nproc-per-node=2", "t.py"))
    # workers that crashed before their first step: the agent used to become "rank 2"
    ranked, codes = _ranks([agent, _part(11, 10, rank=0), _part(12, 10, rank=1)])
    assert ranked == {0: 11, 1: 12} and codes == {"launcher_not_a_rank"}
    ranked, codes = _ranks([agent, _part(11, 10, rank=0, steps=3), _part(12, 10, rank=1, steps=3),
                            _part(13, 11)])  # + a helper interpreter a worker started
    assert ranked == {0: 11, 1: 12} and codes == {"launcher_not_a_rank", "processes_without_steps"}


def test_rank_assignment_without_a_launcher() -> None:
    # a parent without RANK that trains itself is kept; so is a lone program without steps
    ranked, codes = _ranks([_part(10, steps=2), _part(11, 10, rank=1, steps=2)])
    assert ranked == {0: 10, 1: 11} and codes == set()
    assert _ranks([_part(10)]) == ({0: 10}, set())
    # a parent of unranked children (spawned data-loader workers) is not a launcher
    ranked, codes = _ranks([_part(10, steps=4), _part(11, 10), _part(12, 10)])
    assert ranked == {0: 10} and codes == {"processes_without_steps"}
