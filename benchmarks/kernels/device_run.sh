#!/usr/bin/env bash
# The planted kernels on one GPU (issue 21): CUDA-event timings, then Nsight Compute's full set
# on one launch of each, exported as raw-page and details-page CSV. From the repo root:
#   bash benchmarks/kernels/device_run.sh OUTDIR
set -u
out=${1:?OUTDIR}; mkdir -p "$out"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
  ncu --version | tail -1; python3 -c "import cupy; print('cupy', cupy.__version__)"
  python3 -c "import torch; print('torch', torch.__version__)"; } > "$out/README.txt" 2>&1
python3 benchmarks/kernels/planted.py --time "$out/timings.json" > "$out/timings.txt" 2>&1
python3 benchmarks/kernels/gemm_pair.py --time "$out/gemm_timings.json" >> "$out/timings.txt" 2>&1
cat "$out/timings.txt"
t0=$(date +%s)
timeout 300 ncu --set full --import-source yes --kernel-name regex:'^(planted|fixed)_' \
    --launch-count 12 -f -o /tmp/planted python3 benchmarks/kernels/planted.py --once \
    > /tmp/ncu1.log 2>&1; echo "ncu planted rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/ncu1.log
t0=$(date +%s)
timeout 200 ncu --set full --nvtx --nvtx-include 'gemm_fp32/' --nvtx-include 'gemm_bf16/' \
    -f -o /tmp/gemm python3 benchmarks/kernels/gemm_pair.py --once \
    > /tmp/ncu2.log 2>&1; echo "ncu gemm rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/ncu2.log
for r in planted gemm; do
  [ -f /tmp/$r.ncu-rep ] || continue
  ncu --import /tmp/$r.ncu-rep --csv --page raw > "$out/$r.raw.csv" 2>/dev/null
  ncu --import /tmp/$r.ncu-rep --csv --page details > "$out/$r.details.csv" 2>/dev/null
  ncu --import /tmp/$r.ncu-rep --csv --page source --print-source sass,cuda > "$out/$r.source.csv" 2>/dev/null
  cp /tmp/$r.ncu-rep "$out/"
done
ls -la "$out"; wc -c "$out"/*.csv
# at most a few files come back from some hosts: one archive of the reports and CSVs
tar czf "$out/ncu.tar.gz" -C "$out" $(cd "$out" && ls *.csv *.ncu-rep 2>/dev/null) && \
    (cd "$out" && rm -f *.csv *.ncu-rep)
