#!/usr/bin/env bash
# Sanitizer tier: the GPU smoke tests and the device planner's under compute-sanitizer
# memcheck (zero errors).
# Exit 77 (ctest: skipped) where there is no sanitizer or no GPU.
set -u
bin="$1"
command -v compute-sanitizer >/dev/null || { echo "skipped: compute-sanitizer not found"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no GPU"; exit 77; }
exec compute-sanitizer --tool memcheck --error-exitcode 1 "$bin" \
  --gtest_filter='GpuPlanner.SameBytes*:GpuPlanner.Negative*:GpuSmoke.Kimi*:GpuSmoke.OneHead*:GpuSmoke.ManyHeads*:GpuSmoke.DeviceSide*:GpuSmoke.Paged*:GpuSmoke.Pages*:GpuSmoke.Fp8*:GpuEngineArgs.*'
