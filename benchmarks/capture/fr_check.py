"""Check ``record``'s collectives from torch's flight recorder on a real multi-rank job.

Two modes:

    # the program: DDP (several buckets) plus one of each explicit collective per step
    stepscope record -o /tmp/frcheck --force --steps 3-7 -- \\
        torchrun --standalone --nproc-per-node=2 benchmarks/capture/fr_check.py
    # the check: per rank and operation, counts, bytes, sequence numbers, groups, devices
    python benchmarks/capture/fr_check.py --check /tmp/frcheck

NCCL when CUDA is available (one GPU per rank), gloo on CPU otherwise (gloo records no
send/recv and runs reduce_scatter_tensor as an all-reduce: those checks are NCCL's only).
Prints one line per check, ``PASS``/``FAIL``, and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections import Counter, defaultdict
from typing import Any

N = 1000  # elements per rank of the explicit collectives
WINDOW_STEPS = 5  # --steps 3-7


def program() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    model = DDP(torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024)).to(dev),
                bucket_cap_mb=2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sub = dist.new_group(list(range(world)))
    for _ in range(12):
        model(torch.randn(16, 1024, device=dev)).sum().backward()
        out = torch.empty(world * N, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, torch.ones(N, dtype=torch.bfloat16, device=dev))
        dist.reduce_scatter_tensor(torch.empty(N, device=dev), torch.ones(world * N, device=dev))
        dist.broadcast(torch.ones(256, device=dev), 0)
        dist.all_to_all_single(torch.empty(world * 64, device=dev), torch.ones(world * 64, device=dev))
        if cuda and world >= 2:
            buf = torch.ones(128, dtype=torch.float16, device=dev)
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
        dist.barrier(group=sub)
        opt.step()
        opt.zero_grad()
    if cuda:
        torch.cuda.synchronize()
    # the DDP model freed while the group lives (benchmarks/multigpu/harness.py: freed after
    # it, at interpreter exit, DDP models aborted gloo ranks)
    del model, opt
    gc.collect()
    dist.destroy_process_group()


def check(run_dir: str) -> int:
    from stepscope.store.run import Run

    run = Run(run_dir)
    every = run.query("SELECT rank, name, op, bytes, seq, pg, pg_ranks, device, dtype, kernels, "
                      "ts_ns, host_ts_ns, source FROM collectives ORDER BY rank, host_ts_ns"
                      ).to_pylist()
    # the flight recorder's rows; kernels no row claimed come back as kernel_name rows
    rows = [r for r in every if r["source"] == "flight_recorder"]
    for r in sorted({x["rank"] for x in every}):
        left = [x for x in every if x["rank"] == r and x["source"] != "flight_recorder"]
        print(f"rank {r}: {len(left)} communication kernels no recorded call claimed: "
              + ", ".join(sorted({f"{x['op']} (stream of ts {x['ts_ns']})" for x in left})[:6]))
    ranks = sorted({r["rank"] for r in rows})
    world = len(run.manifest.ranks)
    nccl = any(str(r["name"]).startswith("nccl:") for r in rows)
    failures = 0

    def say(ok: bool, what: str) -> None:
        nonlocal failures
        failures += not ok
        print(("PASS " if ok else "FAIL ") + what)

    for r in range(world):
        fr = run.manifest.settings["ranks"][f"rank{r}"].get("flight_recorder")
        print(f"rank {r} flight_recorder: {fr}")
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_rank[row["rank"]].append(row)
    say(ranks == list(range(world)), f"every rank has collectives rows: {ranks} of {world}")
    for r in ranks:
        mine = by_rank[r]
        counts = Counter((x["name"], x["op"]) for x in mine)
        print(f"rank {r}: " + ", ".join(f"{n} ({o}) x{c}" for (n, o), c in sorted(counts.items())))
        say(not any(x["op"] == "other" for x in mine), f"rank {r}: every name maps to an op")
        say(all(x["pg_ranks"] == list(range(world)) for x in mine),
            f"rank {r}: every row has its group's ranks {list(range(world))}")
        if nccl:
            say({x["device"] for x in mine if str(x["name"]).startswith("nccl:")} == {r},
                f"rank {r}: NCCL rows on device {r} (LOCAL_RANK)")
        ag = [x for x in mine if x["op"] == "all_gather"]
        say(len(ag) == WINDOW_STEPS and {x["bytes"] for x in ag} == {world * N * 2},
            f"rank {r}: {WINDOW_STEPS} all-gathers of {world * N * 2} B (the bf16 output)")
        a2a = [x for x in mine if x["op"] == "all_to_all"]
        say(len(a2a) == WINDOW_STEPS and {x["bytes"] for x in a2a} == {world * 64 * 4},
            f"rank {r}: {WINDOW_STEPS} all-to-alls of {world * 64 * 4} B")
        bc = [x for x in mine if x["op"] == "broadcast"]
        say(len(bc) == WINDOW_STEPS and {x["bytes"] for x in bc} == {1024},
            f"rank {r}: {WINDOW_STEPS} broadcasts of 1024 B")
        ddp = sum(x["bytes"] or 0 for x in mine if x["op"] == "all_reduce" and x["bytes"] != world * N * 4)
        params = 2 * (1024 * 1024 + 1024) * 4
        say(ddp == WINDOW_STEPS * params, f"rank {r}: DDP all-reduces carry every gradient byte "
                                          f"each step ({ddp} B = {WINDOW_STEPS} x {params})")
        if nccl:
            rs = [x for x in mine if x["op"] == "reduce_scatter"]
            say(len(rs) == WINDOW_STEPS and {x["bytes"] for x in rs} == {world * N * 4},
                f"rank {r}: {WINDOW_STEPS} reduce-scatters of {world * N * 4} B (the input)")
            p2p = [x for x in mine if x["op"] in ("send", "recv")]
            want = {0: "send", 1: "recv"}.get(r)
            say(want is None or (len(p2p) == WINDOW_STEPS and {x["op"] for x in p2p} == {want}
                                 and {x["bytes"] for x in p2p} == {256}),
                f"rank {r}: {WINDOW_STEPS} {want or 'no'} p2p calls of 256 B")
            say(sum(x["op"] == "barrier" for x in mine) == WINDOW_STEPS,
                f"rank {r}: {WINDOW_STEPS} barriers")
        matched = sum(1 for x in mine if x["kernels"])
        print(f"rank {r}: {matched} of {len(mine)} rows matched to kernels at the merge "
              f"(0 before helper A's complete() is merged)")
    # the same calls, in the same order, on every rank: (group, op, seq) sequences agree
    seqs = [[(x["pg"], x["op"], x["seq"]) for x in by_rank[r] if x["op"] not in ("send", "recv")]
            for r in ranks]
    say(all(s == seqs[0] for s in seqs), "every rank issued the same collectives, same sequence numbers")
    for r in ranks:
        per_pg: dict[str, list[int]] = defaultdict(list)
        for x in by_rank[r]:
            if x["op"] not in ("send", "recv"):
                per_pg[str(x["pg"])].append(int(x["seq"]))
        gaps = {pg: s for pg, s in per_pg.items() if s != list(range(s[0], s[0] + len(s)))}
        say(not gaps, f"rank {r}: sequence numbers consecutive within each group {sorted(per_pg)}")
    return 1 if failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", metavar="RUN", help="check a recorded run instead of running")
    args = ap.parse_args()
    if args.check:
        sys.exit(check(args.check))
    program()
