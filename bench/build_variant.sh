#!/usr/bin/env bash
# A variant of the kbmla CLI for A/B runs on the GPU machine: the named decode TUs
# recompiled with extra nvcc flags (e.g. -DKBMLA_FP8_EXPERIMENT_MODE=1, the load-only
# spike), linked into build-alt/NAME/kbmla; build/ is left as it is.
# Usage: bench/build_variant.sh NAME "FLAGS" kernel_fp8_split.cu [kernel_fp8.cu ...]
# (KBMLA_VARIANT_TESTS=1: also build-alt/NAME/kbmla_gpu_tests.)
# The compile commands are build/'s own (ninja -t commands) minus the dependency-file
# options: reusing -MD -MF made ninja record no header dependencies for those objects
# afterwards, so header edits stopped rebuilding them (bench/NOTES.md v37).
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,8p "$0"; exit 2; }
name=$1; flags=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/build"
ninja kbmla >/dev/null
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$root/build-alt/$name"
cp libkbmla_cuda.a "$work/libkbmla_cuda.a"
commands=$(ninja -t commands kbmla)
for tu in "$@"; do
  obj=CMakeFiles/kbmla_cuda.dir/src/sm90/decode/$tu.o
  cmd=$(grep -F -- "-c $root/src/sm90/decode/$tu " <<<"$commands" | head -1)
  [ -n "$cmd" ] || { echo "build_variant: no compile command for $tu" >&2; exit 1; }
  cmd=${cmd/-o $obj/-o $work/$tu.o}
  cmd=${cmd/-O3/-O3 $flags}
  cmd=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//' <<<"$cmd")
  eval "$cmd"
  (cd "$work" && ar r libkbmla_cuda.a "$tu.o")
done
link=$(tail -1 <<<"$commands")
link=${link//libkbmla_cuda.a/$work/libkbmla_cuda.a}
link=${link/-o kbmla/-o $root/build-alt/$name/kbmla}
eval "$link"
echo "build-alt/$name/kbmla"
# With KBMLA_VARIANT_TESTS=1, the GPU test binary too (build-alt/NAME/kbmla_gpu_tests), so
# that a variant's kernels pass the GPU tiers before their timings count.
if [ "${KBMLA_VARIANT_TESTS:-0}" = 1 ]; then
  ninja tests/kbmla_gpu_tests >/dev/null
  link=$(ninja -t commands tests/kbmla_gpu_tests | tail -1)
  link=${link//libkbmla_cuda.a/$work/libkbmla_cuda.a}
  link=${link/-o tests\/kbmla_gpu_tests/-o $root/build-alt/$name/kbmla_gpu_tests}
  eval "$link"
  echo "build-alt/$name/kbmla_gpu_tests"
fi
