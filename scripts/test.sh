#!/usr/bin/env bash
# One command: install what is missing, build, run the tests. GPU tests skip with a
# message where no sm_90 GPU exists. Pass ctest arguments through (e.g. -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
# The Python package as users install it (pip install .), then its CPU tests against the
# installed copy (ctest above ran them against the build tree).
python3 -m pip install -q --disable-pip-version-check . 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check --break-system-packages .
(cd python/tests && python3 -m pytest -q .)
