#!/usr/bin/env bash
# One command: install what is missing, build, run the tests. GPU tests skip with a
# message where no sm_90 GPU exists. Pass ctest arguments through (e.g. -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
