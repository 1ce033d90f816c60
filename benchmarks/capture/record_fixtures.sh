#!/usr/bin/env bash
# Record the CUPTI buffers that CI decodes (tests/capture/cupti/test_recorded.py): a PyTorch
# training loop with NVTX ranges, a CuPy loop (raw kernel, pageable copies, syncs) and a JAX loop
# (CUDA graphs, XLA's NVTX ranges), each with a short window, packed by pack_dump.py.
# Usage (on a machine with an NVIDIA GPU, from the repository root; torch, cupy, jax installed):
#   OUT=/tmp/fixtures bash benchmarks/capture/record_fixtures.sh
set -u
OUT=${OUT:-/tmp/stepscope-fixtures}
py=${PYTHON:-python3}
D=$(mktemp -d)
mkdir -p "$OUT"
STEPSCOPE_CUPTI_DUMP=$D/torch $py -m stepscope record --quiet -o "$D/run_torch" --steps 20-22 \
  -- $py benchmarks/capture/gpu_train.py --steps 30 --nvtx
STEPSCOPE_CUPTI_DUMP=$D/cupy $py -m stepscope record --quiet -o "$D/run_cupy" --delay 2 --duration 1 \
  -- $py benchmarks/capture/cupy_loop.py --seconds 3
STEPSCOPE_CUPTI_DUMP=$D/jax $py -m stepscope record --quiet -o "$D/run_jax" --delay 6 --duration 1 \
  -- $py benchmarks/capture/jax_train.py --seconds 8
progs="torch cupy jax"
if [ -n "${CUPTI12:-}" ]; then  # CUPTI12=/path/libcupti.so.12: the CuPy loop through a CUDA 12 CUPTI
  env STEPSCOPE_CUPTI_LIB="$CUPTI12" STEPSCOPE_CUPTI_DUMP=$D/cupti12 $py -m stepscope record --quiet -o "$D/run_cupti12" \
    --delay 2 --duration 1 -- $py benchmarks/capture/cupy_loop.py --seconds 3
  $py benchmarks/capture/inspect_run.py "$D/run_cupti12" > "$OUT/cupti12.inspect.json" 2>&1
  progs="$progs cupti12"
fi
for p in $progs; do
  lib=""; [ "$p" = cupti12 ] && lib="$CUPTI12"  # the walk is libcupti's that recorded it
  env ${lib:+STEPSCOPE_CUPTI_LIB=$lib} $py benchmarks/capture/pack_dump.py "$D/$p" "$OUT/cupti-$p.npz" --max-bytes 300000 \
    --facts "{\"program\": \"$p\", \"run_rows\": $($py -c "
import json, sys
from stepscope.store.run import Run
r = Run('$D/run_$p')
print(json.dumps(r.manifest.tables))" 2>/dev/null || echo null)}"
done
ls -la "$OUT"
