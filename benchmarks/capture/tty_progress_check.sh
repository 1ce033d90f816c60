#!/usr/bin/env bash
# Does `stepscope record` show the merge's progress on a real terminal, and only there?
# Runs a launch-heavy program for SECONDS under `script` (a pseudo-terminal on stderr), then the
# same with stderr to a file; prints the merge time and whether the bar's text appeared, and
# keeps both transcripts. Needs a GPU, torch and util-linux `script`.
#   bash benchmarks/capture/tty_progress_check.sh OUTDIR [SECONDS]
set -uo pipefail
out=${1:?OUTDIR}; secs=${2:-15}
mkdir -p "$out"
prog=(python3 benchmarks/scenarios/program.py launch_bound --seconds "$((secs + 6))")
rec=(python3 -m stepscope record --delay 2 --duration "$secs" --force)
t0=$(date +%s.%N)
script -qefc "${rec[*]} -o /tmp/tty-run -- ${prog[*]}" "$out/tty.typescript" >/dev/null
echo "tty run: rc=$? wall $(echo "$(date +%s.%N) - $t0" | bc) s"
"${rec[@]}" -o /tmp/pipe-run -- "${prog[@]}" >/dev/null 2>"$out/pipe.stderr"
echo "pipe run: rc=$?"
for f in "$out/tty.typescript" "$out/pipe.stderr"; do
  n_decode=$(grep -ac "decoding GPU records" "$f")
  n_write=$(grep -ac "writing tables" "$f")
  echo "$(basename "$f"): lines with 'decoding GPU records' $n_decode, 'writing tables' $n_write"
done
python3 - "$out/tty.typescript" <<'PY'
import re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
pcts = re.findall(r"(decoding GPU records|writing tables)[^%\n]*?(\d+)%", raw)
print("progress updates seen:", len(pcts), "first/last:", pcts[:1], pcts[-1:])
PY
