#!/usr/bin/env bash
# Runs on the GPU machine over a carried build/: the GPU test tiers and the benchmark,
# logs and the bench JSON under $OUT (or ./gpu-out). Usage:
#   bench/run_gpu_suite.sh [tiers...]   tiers: sass smoke sweep planner large invariance engine dcp example python
#   sanitizer bench bench-fp8 bench-fp8-block ncu (default: all but ncu). Build here with scripts/build-gpu-carry.sh
#   and carry build/ and build-py312/ (the module for the GPU machine's Python 3.12, for
#   the `python` tier).
set -uo pipefail
out="${OUT:-gpu-out}"; mkdir -p "$out"
commit="${KBMLA_COMMIT:-unknown}"
tiers="${*:-sass smoke sweep planner large invariance engine dcp example python sanitizer bench bench-fp8 bench-fp8-block}"
# NCCL for the dcp tier: the engine's libnccl.so.2 (here: the nvidia-nccl Python package).
if [ -z "${KBMLA_NCCL_LIBRARY:-}" ]; then
  KBMLA_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  [ -f "$KBMLA_NCCL_LIBRARY" ] || KBMLA_NCCL_LIBRARY=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
  export KBMLA_NCCL_LIBRARY
fi
# Never NVLink multicast (it can take the host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
status=0
for t in $tiers; do
  case "$t" in
    sass) cuobjdump --dump-sass build/libkbmla_cuda.a > "$out/sass.txt" 2>&1
          echo "SASS: $(grep -cE 'HGMMA' "$out/sass.txt") HGMMA, $(grep -cE '\bLDL|\bSTL' "$out/sass.txt") local-memory instructions" ;;
    smoke) timeout -s KILL 200 build/tests/kbmla_gpu_tests --gtest_filter='GpuSmoke.*' > "$out/smoke.log" 2>&1 || status=1
           tail -3 "$out/smoke.log" ;;
    sweep) timeout -s KILL 400 build/tests/kbmla_gpu_tests --gtest_filter='Cases/GpuSweep.*' > "$out/sweep.log" 2>&1 || status=1
           grep -E "FAILED|PASSED|Failure" "$out/sweep.log" | head -20 ;;
    planner) timeout -s KILL 200 build/tests/kbmla_gpu_tests --gtest_filter='GpuPlanner.*' > "$out/planner.log" 2>&1 || status=1
             tail -3 "$out/planner.log" ;;
    large) timeout -s KILL 300 build/tests/kbmla_gpu_tests --gtest_filter='GpuLarge.*' > "$out/large.log" 2>&1 || status=1
           tail -3 "$out/large.log" ;;
    invariance) timeout -s KILL 200 build/tests/kbmla_gpu_tests --gtest_filter='GpuBatchInvariance.*' > "$out/invariance.log" 2>&1 || status=1
                tail -3 "$out/invariance.log" ;;
    engine) timeout -s KILL 200 build/tests/kbmla_gpu_tests --gtest_filter='GpuEngineArgs.*' > "$out/engine.log" 2>&1 || status=1
            tail -3 "$out/engine.log" ;;
    dcp) echo "NCCL: ${KBMLA_NCCL_LIBRARY:-none}; GPUs: $(nvidia-smi -L | wc -l)"
         timeout -s KILL 300 build/tests/kbmla_gpu_tests --gtest_filter='GpuDcp*' > "$out/dcp.log" 2>&1 || status=1
         grep -E "SKIPPED|OK \]|FAILED|PASSED" "$out/dcp.log" | tail -6 ;;
    example) timeout -s KILL 200 build/kbmla_example_decode_loop 64 100 > "$out/example.log" 2>&1 || status=1
             cat "$out/example.log" ;;
    python) PYTHONPATH="${KBMLA_PY_BUILD:-build-py312}/python" timeout -s KILL 300 python3 -m pytest -q python/tests \
              > "$out/python.log" 2>&1 || status=1
            tail -5 "$out/python.log" ;;
    sanitizer) timeout -s KILL 300 tests/gpu/run_sanitizer.sh build/tests/kbmla_gpu_tests > "$out/sanitizer.log" 2>&1 || status=1
               grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/sanitizer.log" | tail -3 ;;
    bench) for r in $(seq 1 "${BENCH_REPEATS:-1}"); do
             timeout -s KILL 500 build/kbmla bench --case all --commit "$commit" --json "$out/bench-$r.json" ${BENCH_ARGS:-} > "$out/bench-$r.log" 2>&1 || status=1
             cat "$out/bench-$r.log"
           done ;;
    bench-fp8) # Every case with an e4m3 cache (per-tensor scale), work list only.
           timeout -s KILL 300 build/kbmla bench --case all --kv-dtype fp8_e4m3 --policies worklist --commit "$commit" \
             --json "$out/bench-fp8.json" ${BENCH_ARGS:-} > "$out/bench-fp8.log" 2>&1 || status=1
           awk '$2 == "worklist"' "$out/bench-fp8.log" ;;
    bench-fp8-block) # Every case with an e4m3 cache with per-block scales (656 B/token), work list only.
           timeout -s KILL 300 build/kbmla bench --case all --kv-dtype fp8_e4m3_block --policies worklist --commit "$commit" \
             --json "$out/bench-fp8-block.json" ${BENCH_ARGS:-} > "$out/bench-fp8-block.log" 2>&1 || status=1
           awk '$2 == "worklist"' "$out/bench-fp8-block.log" ;;
    ncu) # Kernel durations (decode and combine separately) for the cases in NCU_CASES.
         for c in ${NCU_CASES:-uniform_B128_Sq1_H16}; do for pol in worklist static; do
           timeout -s KILL 120 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'mla_decode|combine' \
             --launch-skip 4 --launch-count 4 build/kbmla bench --case "$c" --policies "$pol" --runs 50 > "$out/ncu_${c}_${pol}.log" 2>&1
           echo "$c $pol: $(grep -E 'mla_decode|combine_kernel|gpu__time_duration' "$out/ncu_${c}_${pol}.log" | awk '/mla_decode|combine/{k=($0~/combine/)?"combine":"decode"} /gpu__time_duration/{print k, $(NF)}' | tr '\n' ' ')"
         done; done ;;
    *) echo "unknown tier $t"; status=2 ;;
  esac
done
# At most 8 files come back from the device machine: logs and SASS go in one archive,
# the bench JSON stays beside it.
logs=$(cd "$out" && find . -maxdepth 1 \( -name '*.log' -o -name '*.txt' \) | sort)
if [ -n "$logs" ]; then
  (cd "$out" && tar czf logs.tgz $logs && rm -f $logs)
fi
exit $status
