#!/usr/bin/env bash
# A/B on the GPU machine: binary A_BIN with bench arguments A_ARGS against B_BIN with
# B_ARGS (binaries default to build/kbmla: then an A/B of planner settings), alternated
# ROUNDS times over CASE (comma-separated exact case names of bench/cases.json) for each KV
# dtype in DTYPES, work list only, with --balance; prints case, median us, % of copy, busy
# max/mean (max us) and the combine's span per run; raw logs under $OUT.
# Usage: A_ARGS="" B_ARGS="--cost-split 1500" CASE=skew_... DTYPES=bf16,fp8_e4m3 bench/ab_costs.sh
#        A_BIN=build-alt/old/kbmla CASE=... DTYPES=bf16 bench/ab_costs.sh
out="${OUT:-gpu-out}"; mkdir -p "$out"
cases="$out/${AB_TAG:-costs}-cases.json"
python3 - "$cases" "$CASE" <<'PY' || exit 1
import json, sys
names = sys.argv[2].split(',')
d = json.load(open('bench/cases.json'))
d['cases'] = [c for c in d['cases'] if c['name'] in names]
missing = set(names) - {c['name'] for c in d['cases']}
if missing: sys.exit(f'unknown cases: {sorted(missing)}')
json.dump(d, open(sys.argv[1], 'w'))
PY
for dt in ${DTYPES//,/ }; do
  for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in A B; do
      args="$A_ARGS"; bin="${A_BIN:-build/kbmla}"
      [ $v = B ] && args="$B_ARGS" && bin="${B_BIN:-build/kbmla}"
      log="$out/${AB_TAG:-costs}-$dt-$v-$r.log"
      : > "$log"
      timeout -s KILL 300 "$bin" bench --cases "$cases" --case all --kv-dtype "$dt" --policies worklist --balance \
        $args >> "$log" 2>&1
      echo "== $dt $v $r ($bin $args)"
      awk '$2 ~ /^worklist/ {print $1, $4, $8, $12, $13, $(NF-1), $NF}' "$log"
    done
  done
done
