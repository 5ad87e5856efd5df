#!/usr/bin/env bash
# Diagnostic on the GPU machine: the paged lognormal case at page sizes PAGES (default
# 16,32,64) with the cache's pages placed at random in runs of RUNS (default 1,2,4)
# physically consecutive pages, for each KV dtype in DTYPES, ROUNDS times; prints
# dtype, page size, runs, median us, % of copy. Whether a small page's penalty follows the
# physical run length (the memory system) or the page size (the kernel's per-page work).
out="${OUT:-gpu-out}"; mkdir -p "$out"
bin="${BIN:-build/kbmla}"
cases="$out/page-runs-case.json"
python3 -c "import json; d = json.load(open('bench/cases.json')); d['cases'] = [c for c in d['cases'] if c['name'] == 'lognormal_H16_Sq1']; json.dump(d, open('$cases', 'w'))" || exit 1
for r in $(seq 1 "${ROUNDS:-2}"); do
  dtypes=${DTYPES:-fp8_e4m3,fp8_e4m3_block,bf16}; for dt in ${dtypes//,/ }; do
    pages=${PAGES:-16,32,64}; for ps in ${pages//,/ }; do
      runs_list=${RUNS:-1,2,4}; for runs in ${runs_list//,/ }; do
        line=$("$bin" bench --cases "$cases" --case all --kv-dtype "$dt" --page-size "$ps" --page-runs "$runs" \
                 --policies worklist 2>&1 | awk '$2 ~ /^worklist/ {print $4, $8}' | head -1)
        echo "$dt page $ps runs $runs round $r: $line"
      done
    done
  done
done | tee "$out/page-runs.txt"
