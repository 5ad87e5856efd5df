#!/usr/bin/env bash
# One command on a fresh machine: install what is missing, build, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/kbmla demo
