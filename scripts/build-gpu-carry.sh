#!/usr/bin/env bash
# Builds what a GPU run carries (bench/run_gpu_suite.sh): build/ (library, CLI, tests,
# example) and build-py312/ (the Python module for the GPU machine's Python 3.12, for
# the `python` tier). Carry both: `carry: ["build", "build-py312"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
py312=""
for cand in "${KBMLA_PY312:-}" /root/.pyenv/versions/3.12.1/bin/python3.12 python3.12; do
  [ -n "$cand" ] || continue
  if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    py312=$(command -v "$cand")
    break
  fi
done
if [ -z "$py312" ]; then
  echo "build-gpu-carry: no python3.12 here (set KBMLA_PY312); skipping build-py312" >&2
  exit 0
fi
"$py312" -c 'import nanobind' 2>/dev/null || "$py312" -m pip install -q nanobind==2.4.0
[ -f build-py312/build.ninja ] ||
  cmake -S . -B build-py312 -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DPython_EXECUTABLE="$py312"
cmake --build build-py312 -j "$(nproc)" --target _kbmla
