#!/usr/bin/env bash
# CI: make the HTML report's browser tests (tests/browser/) runnable: a system Chromium at
# /usr/bin/chromium. The Python side (playwright) comes with `pip install -e '.[dev]'`;
# `playwright install` is never used (it downloads a browser). Idempotent.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
/usr/bin/chromium --version
