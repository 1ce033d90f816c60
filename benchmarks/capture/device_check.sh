#!/usr/bin/env bash
# GPU capture check: record a PyTorch, a JAX and a CuPy program with each GPU backend and print
# what the runs hold. Usage (on a machine with an NVIDIA GPU, from the repository root):
#   OUT=/tmp/check bash benchmarks/capture/device_check.sh
# Needs stepscope importable (pip install -e . or PYTHONPATH=src) and torch, jax, cupy installed.
# RUNS="torch_cupti jax ..." runs only those (default: all of them).
set -u
OUT=${OUT:-/tmp/stepscope-check}
mkdir -p "$OUT"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$py -c "import torch; print('torch', torch.__version__)"
$py -c "from stepscope.capture.cupti.native import build_shim, find_libcupti; print('shim', build_shim()); print('libcupti', find_libcupti())"
ALL="torch_cupti torch_all_api torch_torchbk torch_pycupti torch_nvtx_steps torch_killed torch_to_exit jax cupy"
RUNS=${RUNS:-$ALL}
rec() {
  local name=$1; shift
  case " $RUNS " in *" $name "*) ;; *) return 0 ;; esac
  local t0=$(date +%s%N); "$@"; local rc=$?
  echo "$name rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
rec torch_cupti $py -m stepscope record --quiet -o "$OUT/torch_cupti" --steps 20-30 -- $py benchmarks/capture/gpu_train.py --steps 60 --nvtx
rec torch_all_api $py -m stepscope record --quiet -o "$OUT/torch_all_api" --gpu-api all --steps 20-30 -- $py benchmarks/capture/gpu_train.py --steps 60
rec torch_torchbk $py -m stepscope record --quiet -o "$OUT/torch_torchbk" --backend torch --steps 20-30 -- $py benchmarks/capture/gpu_train.py --steps 60
rec torch_pycupti $py -m stepscope record --quiet -o "$OUT/torch_pycupti" --backend cupti-python --steps 20-30 -- $py benchmarks/capture/gpu_train.py --steps 60
rec torch_nvtx_steps $py -m stepscope record --quiet -o "$OUT/torch_nvtx_steps" --nvtx forward --steps 5-9 -- $py benchmarks/capture/gpu_train.py --steps 30 --nvtx
# killed by SIGKILL mid-window (the window opens at step 20, the kill comes ~12 s after torch is
# imported): what the flushes before it wrote survives, GPU records included
rec torch_killed $py -m stepscope record --quiet -o "$OUT/torch_killed" --steps 20-1000000 -- $py benchmarks/capture/gpu_train.py --steps 1000000 --kill-after-s 14
# the window is still open when the program ends: closed at exit, CUPTI detached during CUDA's teardown
rec torch_to_exit $py -m stepscope record --quiet -o "$OUT/torch_to_exit" --steps 40-200 -- $py benchmarks/capture/gpu_train.py --steps 60 --nvtx
rec jax $py -m stepscope record --quiet -o "$OUT/jax" --delay 9 --duration 2 -- $py benchmarks/capture/jax_train.py --seconds 13
rec cupy $py -m stepscope record --quiet -o "$OUT/cupy" --delay 2 --duration 2 -- $py benchmarks/capture/cupy_loop.py --seconds 5
for r in $ALL; do
  [ -d "$OUT/$r" ] && $py benchmarks/capture/inspect_run.py "$OUT/$r" > "$OUT/$r.inspect.json" 2>&1
done
$py -m stepscope report "$OUT/torch_cupti" > "$OUT/torch_cupti.report.txt" 2>&1
$py -m stepscope report "$OUT/cupy" > "$OUT/cupy.report.txt" 2>&1
ls -la "$OUT"
