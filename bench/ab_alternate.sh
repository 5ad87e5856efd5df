#!/usr/bin/env bash
# A/B on the GPU machine: alternates two kbmla binaries over the bf16 cases of
# bench/cases.json (fp8 and paged cases left out), work list only, ROUNDS times each,
# printing case, median us, % of copy and TFLOP/s per run; raw logs under $OUT.
# Usage: bench/ab_alternate.sh [new_binary] [old_binary]   (defaults build/kbmla,
# build-alt/old/kbmla; carry both). CASE: comma-separated case-name filters (default all);
# AB_ARGS: extra bench arguments (e.g. --spike: the load-only / math-only / no-combine rows
# too); ROUNDS (default 2); AB_TAG: log-name prefix (default ab), to keep several A/Bs apart.
out="${OUT:-gpu-out}"; mkdir -p "$out"
CASE="${CASE:-all}"
new="${1:-build/kbmla}"; old="${2:-build-alt/old/kbmla}"
cases="$out/bf16cases.json"
python3 - "$cases" <<'PY' || exit 1
import json, sys
d = json.load(open('bench/cases.json'))
d['cases'] = [c for c in d['cases'] if not c['name'].startswith(('fp8', 'paged'))]
json.dump(d, open(sys.argv[1], 'w'))
PY
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in new old; do
    bin=$new; [ $v = old ] && bin=$old
    : > "$out/${AB_TAG:-ab}-$v-$r.log"
    for c in ${CASE//,/ }; do
      timeout -s KILL 80 "$bin" bench --cases "$cases" --case "$c" --policies worklist ${AB_ARGS:-} \
        >> "$out/${AB_TAG:-ab}-$v-$r.log" 2>&1
    done
    head -1 "$out/${AB_TAG:-ab}-$v-$r.log" | cut -c1-120
    echo "== $v $r"
    awk '$2 ~ /^worklist/ {print $1, $2, $4, $8, $9}' "$out/${AB_TAG:-ab}-$v-$r.log"
  done
done
