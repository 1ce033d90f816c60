#!/usr/bin/env bash
# What CUPTI costs in each state (cupti_states.py), with each libcupti given, in turn: one process
# per library and workload. PyTorch loads libcupti by path, from the first nvidia/cu13/lib (or
# nvidia/cuda_cupti/lib) it finds on sys.path, so a library is given by putting a folder
# nvidia/cu13/lib/libcupti.so.13 first on PYTHONPATH (LD_PRELOAD does not work: torch then maps a
# second copy, its own, and that is the one in use). "stock" runs without.
#
#   OUT=/tmp/v bash benchmarks/capture/cupti_versions.sh stock /path/13.5/libcupti.so.13 ...
#
# Env: WORKLOADS (default "launch gpt"), ROUNDS (default 3). Each run writes
# $OUT/states-<label>-<workload>.json (label: "stock" or the library's parent folder name) and
# its log; the summary of each holds the libcupti path in use, its API version and the
# diagnostics (a record layout this stepscope does not know shows there).
set -u
OUT=${OUT:-/tmp/cupti-versions}
mkdir -p "$OUT"
py=${PYTHON:-python3}
here=$(dirname "$0")
for lib in "$@"; do
  pp=${PYTHONPATH:-}
  if [ "$lib" = stock ]; then
    label=stock
  else
    label=$(basename "$(dirname "$lib")")
    over=$(mktemp -d)
    mkdir -p "$over/nvidia/cu13/lib" && cp "$lib" "$over/nvidia/cu13/lib/libcupti.so.13"
    pp=$over${pp:+:$pp}
  fi
  for w in ${WORKLOADS:-launch gpt}; do
    PYTHONPATH=$pp $py "$here/cupti_states.py" --out "$OUT/states-$label-$w.json" --workload "$w" \
      --rounds "${ROUNDS:-3}" > "$OUT/states-$label-$w.log" 2>&1
    echo "$label $w rc=$?"
  done
done
