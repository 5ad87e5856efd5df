#!/usr/bin/env bash
# A/B on the GPU machine: ROUNDS rounds over the named cases of bench/cases.json with one
# cache dtype, the binaries alternating within each round, their order rotated by one each
# round (each case from an idle GPU: --cool-ms, default 1000), work list only; per binary
# and round a log and the bench JSON under $OUT, named
# <dir of the binary>-<binary>-<dtype>-r<round>. Summarise them with bench/ab_table.py.
# AB_FLAGS: more bench flags for every run (e.g. --graph: graph-replay medians beside the
# eager ones, ab_table.py --graph).
# Build the variants with bench/build_variant.sh and carry them.
# Usage: bench/ab_multi.sh ROUNDS CASE[,CASE...] DTYPE BIN_A BIN_B [BIN ...]
#   e.g. bench/ab_multi.sh 3 uniform_B128_Sq4_H16_L4096,lognormal_H16_Sq4 fp8_e4m3_block \
#          build/kbmla build-alt/scaledv/kbmla
set -uo pipefail
[ $# -ge 5 ] || { sed -n 2,10p "$0"; exit 2; }
out="${OUT:-gpu-out}"; mkdir -p "$out"
rounds=$1; cases=$2; dtype=$3; shift 3
python3 - "$out/ab-cases.json" "$cases" <<'PY' || exit 1
import json, sys
d = json.load(open('bench/cases.json'))
want = sys.argv[2].split(',')
d['cases'] = [c for c in d['cases'] if c['name'] in want]
missing = sorted(set(want) - {c['name'] for c in d['cases']})
if missing:
    sys.exit(f"ab_multi: no such case in bench/cases.json: {', '.join(missing)}")
json.dump(d, open(sys.argv[1], 'w'))
PY
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > "$out/gpu.txt"
bins=("$@"); n=${#bins[@]}
for r in $(seq 1 "$rounds"); do
  # Each round starts one binary later (round 1: A B C, round 2: B C A, ...), so that no
  # binary always runs first after the copy-ceiling warm-up or last before the next round.
  for i in $(seq 0 $((n - 1))); do
    bin=${bins[$(((i + r - 1) % n))]}
    tag=$(basename "$(dirname "$bin")")-$(basename "$bin")
    timeout -s KILL 300 "$bin" bench --cases "$out/ab-cases.json" --case all --kv-dtype "$dtype" --policies worklist \
      --cool-ms "${COOL:-1000}" ${AB_FLAGS:-} --json "$out/$tag-$dtype-r$r.json" > "$out/$tag-$dtype-r$r.log" 2>&1
    echo "== $tag r$r rc=$?"
    awk '$2 ~ /^worklist/ {print $1, $4, $8, $9}' "$out/$tag-$dtype-r$r.log"
  done
done
