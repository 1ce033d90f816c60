#!/usr/bin/env bash
# `stepscope kernels` end to end on one GPU (issue 21): record a training program, re-run it
# under Nsight Compute for its top kernels, and report. From the repo root:
#   bash benchmarks/kernels/kernels_e2e.sh OUTDIR
# Checks: the run gains kernel_metrics rows joined to its kernels (ms_per_step set), the report
# has the kernel section, and the command took minutes at most.
set -u
out=${1:?OUTDIR}; mkdir -p "$out"
py=${PYTHON:-python3}
t0=$(date +%s)
$py -m stepscope record -o "$out/fp32.stepscope" --force -- \
    $py benchmarks/scenarios/program.py fp32_no_tf32 > "$out/record.log" 2>&1
echo "record rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
$py -m stepscope kernels --top 3 "$out/fp32.stepscope" -- \
    $py benchmarks/scenarios/program.py fp32_no_tf32 > "$out/kernels.log" 2>&1
echo "kernels rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$out/kernels.log"
# the kernel_metrics rows, read with pyarrow (DuckDB, which `stepscope query` needs, is not on
# every GPU machine)
$py -c "import sys; from stepscope.store.run import Run
t = Run(sys.argv[1]).table('kernel_metrics').select(['name', 'grid_x', 'grid_y', 'grid_z',
    'block_x', 'dur_ns', 'sm_throughput_pct', 'tensor_active_pct'])
for row in t.to_pylist(): print(row)" "$out/fp32.stepscope" \
    > "$out/kernel_metrics.txt" 2>&1
$py -m stepscope report "$out/fp32.stepscope" --format text > "$out/report.txt" 2>&1
$py -m stepscope report "$out/fp32.stepscope" --format json -o "$out/report.json" 2>&1
$py -m stepscope report "$out/fp32.stepscope" -o "$out/report.html" 2>&1
cat "$out/kernel_metrics.txt"; grep -A 12 "Profiled kernels" "$out/report.txt"
# the same with the counters refused (a non-root user where profiling is restricted) says so in
# one line: run as such a user to check, e.g. `sudo -u nobody ...`
