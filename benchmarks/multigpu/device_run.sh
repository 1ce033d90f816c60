#!/usr/bin/env bash
# One call on a machine with N GPUs (the issue 20 proof): the topology the capture reads, the
# flight-recorder check, then the planted suite. Run from the repo root with the duckdb/msgspec
# wheels in /tmp/site:  bash benchmarks/multigpu/device_run.sh OUTDIR [BUDGET_S] [suite args...]
set -u
out=${1:?OUTDIR}; budget=${2:-480}; shift 2 || shift $#
mkdir -p "$out"
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
n=${NPROC:-$(nvidia-smi -L | wc -l)}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
  timeout 60 python3 benchmarks/capture/topology_check.py; } > "$out/topology.txt" 2>&1
{ timeout 120 python3 -m stepscope record -o /tmp/frcheck --force --steps 3-7 -- \
    torchrun --standalone --nproc-per-node="$n" benchmarks/capture/fr_check.py 2>&1 | grep -i deprecat
  timeout 60 python3 benchmarks/capture/fr_check.py --check /tmp/frcheck
  timeout 60 python3 -m stepscope report /tmp/frcheck | head -60
  tar czf "$out/frcheck.tar.gz" -C /tmp frcheck; } > "$out/fr_check.txt" 2>&1
timeout $((budget + 60)) python3 benchmarks/multigpu/run_suite.py /tmp/mg --nproc "$n" \
    --budget "$budget" --copy-to "$out/mg" "$@" > /tmp/suite.log 2>&1
tail -c 9000 /tmp/suite.log
# the rank-parallel import on this machine's CPUs (process pool; Dask is not installed there)
[ -n "${RANKPAR_S:-}" ] && timeout "$RANKPAR_S" python3 benchmarks/rank_parallel.py --ranks 64 --workers 1,4,16 \
    --engines process --repeats 3 --python python3 --json "$out/rank_parallel.json" \
    > /tmp/rank_parallel.txt 2>&1; tail -5 /tmp/rank_parallel.txt
