#!/usr/bin/env bash
# Diagnostic on the GPU machine (bench/NOTES.md v31): the fp8 16-row cases timed in a fresh
# process ("fresh": five fp8 cases alone) and after the bf16 cases that precede
# fp8_lognormal_H16_Sq1 in bench/cases.json ("used": their larger caches allocated and freed
# first), for each binary in BINS (default build/kbmla), ROUNDS times; prints round, binary,
# state, case, median us, % of copy. v31 measured the 16-row tiles 5-16 % slower "used".
out="${OUT:-gpu-out}"; mkdir -p "$out"
python3 - "$out" <<'PY' || exit 1
import copy, json, sys
d = json.load(open('bench/cases.json'))
by = {c['name']: c for c in d['cases']}
def fp8x(n):
    c = copy.deepcopy(by[n]); c['name'] = 'fp8x_' + n; c['kv_dtype'] = 'fp8_e4m3'; return c
targets = [by['fp8_lognormal_H16_Sq1']] + [fp8x(n) for n in (
    'uniform_B128_Sq1_H16_L4096', 'skew_1x131072_127x1024_H16_Sq1', 'uniform_B1_Sq1_H16_L131072',
    'uniform_B64_Sq1_H16_L32768')]
i = [c['name'] for c in d['cases']].index('fp8_lognormal_H16_Sq1')
json.dump({**d, 'cases': targets}, open(sys.argv[1] + '/state-fresh.json', 'w'))
json.dump({**d, 'cases': d['cases'][:i] + targets}, open(sys.argv[1] + '/state-used.json', 'w'))
PY
for r in $(seq 1 "${ROUNDS:-2}"); do
  for bin in ${BINS:-build/kbmla}; do
    for state in fresh used; do
      "$bin" bench --cases "$out/state-$state.json" --case all --policies worklist 2>&1 |
        awk -v t="$r $bin $state" '$1 ~ /^fp8/ {print t, $1, $4, $8}'
    done
  done
done | tee "$out/process-state.txt"
