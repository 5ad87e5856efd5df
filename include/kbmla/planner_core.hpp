// KV-balanced planner core: plain integer C++, host/device (KBMLA_HD), no allocation,
// no exceptions. The host planner (planner.hpp) and the device planner run this very
// code, so both produce the same bytes by construction.
//
// Model. A request b with L tokens has nb = ceil(L / kv_block) KV blocks and, with the
// cross-boundary row layout, T = ceil(heads * q_len / tile_rows) q tiles, of which the
// first t0 see no key at all (causal with L < q_len, or L = 0). A work item is
// (q tile, request, split); a split is a contiguous KV block range of the request, and
// every q tile of the request with a visible key gets one item per split. A cluster
// slot (one cluster of `cluster_size` CTAs) costs
//     sum over its items of  blocks * per_kv_block + per_item (+ per_split if split).
//
// Algorithm. Requests are taken in index order and poured into cluster slots up to a
// capacity `cap`; a request that does not fit the current slot is cut there (if at least
// min_piece blocks fit) and continues in the next slot, so splits of one request may
// differ in length. A cap within 1/256 of the smallest for which everything fits the
// available slots is found by a K-ary search over integers (CapSearch,
// planner_search.hpp). Because pieces of one request go to consecutive slots and each cut
// advances the slot, a plan has at most B + G - 1 pieces (G = slots) and at most 2 (G - 1)
// partial-output slots. When whole requests, their q tiles spread over slots, fit within
// 1/16 of that cap, the plan makes no cut at all (see fill).
//
// Work-list form. We use the seed's walk with the wider column form: slot g's items sit
// at entries g, g + A, g + 2A, ... followed by one negative entry, A being the slots that
// hold work (slots fill in order, so they are 0..A-1 and the decode launches A clusters);
// the list length is A * (max items per slot + 1) and every entry past a column's items
// is negative. So a CTA stops at the end of its own column, and one slot may take several
// short requests while another takes one long slice.
#pragma once

#include <climits>
#include <cstdint>

#include "kbmla/fast_divmod.hpp"
#include "kbmla/hd.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {

// Cost units are nanoseconds of one CTA (cluster) of an H200 with every SM streaming.
//   per_kv_block: measured (bench --spike, load-only kernel, 2026-11-29): 2.38 us per
//                 64-token bf16 block per CTA with 132 CTAs streaming (73.7 KB each).
//   per_item:     Q tile load (72 KiB) and epilogue not hidden behind the stream; estimated
//                 at ~1.3 blocks' worth (the item boundary drains part of the pipeline).
//   per_split:    partial O write (up to 64 x 512 fp32 = 128 KiB; bf16, half that, for
//                 the fp8 caches) and its combine read;
//                 ~1 block's worth. Both to be refined from per-CTA busy intervals (issue 4).
struct CostModel {
  int64_t per_kv_block;
  int64_t per_item;
  int64_t per_split;
};
inline constexpr CostModel kDefaultCostModel{2400, 3000, 2500};

// The sm_90 kernels' models, by cache dtype and the query rows of one request
// (heads x q_len): block and item costs for each class of rows (at most 16, 17..64 in one
// 64-row tile, more than 64 in 2-CTA clusters). per_split follows the rows of one CTA: a
// split item writes rows x 512 fp32 of partial O that its CTA must issue before its next
// item (2 KiB per row at the ~32 GB/s per-SM share of HBM: ~64 ns), and the combine reads
// them back; measured on lognormal_H64_Sq1, where 64-row partials cost ~10 points of copy
// bandwidth against the 16-row case with the same plan (bench/NOTES.md, v4). The fp8
// caches' partials are bf16 (1 KiB per row: ns_per_partial_row 32; v36).
struct RowClassCosts {
  int64_t per_kv_block, per_item;
};
KBMLA_HD CostModel sm90_cost_model_by_rows(int rows, RowClassCosts narrow, RowClassCosts tile, RowClassCosts cluster,
                                           int64_t ns_per_partial_row = 64) {
  const RowClassCosts& k = rows <= 16 ? narrow : rows <= 64 ? tile : cluster;
  return {k.per_kv_block, k.per_item, 1000 + ns_per_partial_row * int64_t{rows < 64 ? rows : 64}};
}

// Blocks and items of tiles of 17..64 rows (v28): a least-squares fit of each CTA's
// measured busy time (bench --balance, 1,300-2,000 CTAs over 10-13 cases per kernel) on
// its blocks, items and split items gave, in us per block / per item: bf16 2.35 / 8.4,
// fp8 per-tensor 1.41 / 8.3, fp8 per-block 2.19 / 8.6: an item of a 64-row tile costs
// 3.6-5.9 blocks (its Q tile, the pipeline drained at the item's end, 64 rows of output),
// where the models had 1.25 (bf16) and 3. With the fitted values (two alternated runs on
// an H200): bf16 lognormal_H16_Sq4 363 -> 357 us, lognormal_H64 361 -> 356, skew_Sq4 103
// -> 99 (busy max/mean 1.10 -> 1.08); fp8 kimi_lognormal_B64_Sq4_H12 92 -> 89.5, skew_Sq4
// 78 -> 76, B32_Sq4 203 -> 200; per-block lognormal_H16_Sq4 363 -> 356; the other 64-row
// cases level. For tiles of at most 16 rows the fit (bf16 2.26 / 1.7, fp8 1.11 / 4.8,
// per-block 1.34 / 4.4) changed no measured time, and bf16 above 64 rows (2-CTA clusters)
// fitted poorly (rms 17 us; 1.94 us per item measured no better on the 96-head Kimi case):
// both kept the older values (2400 / 3000; the fp8 narrow item is 5000 since v63, below).
// The fp8 clusters: below.
// bf16 tiles of at most 16 rows since the narrow consumers (v41, bench/NOTES.md): an item
// at 6000 ns. Their blocks run at the loads' pace, so an item's fixed part (lead-in, Q,
// first stage, output) weighs more; two alternated rounds of per_item 3000 / 6000 / 10000:
// skew_Sq1 89.0, 93.4 / 88.8, 88.6 / 91.2, 90.6 us, busy max/mean 1.08, 1.11 / 1.06, 1.06 /
// 1.10, 1.12; lognormal_H16_Sq1 and B1 level.
KBMLA_HD CostModel sm90_bf16_cost_model(int rows) {
  return sm90_cost_model_by_rows(rows, {2400, 6000}, {2350, 8400}, {2400, 3000});
}

// The fp8 (e4m3, per-tensor scale) kernel's model: a block of a tile of at most 16 rows
// costs less than half the bf16 one (1000 ns measured best of {2400, 1500, 1000} on six
// skewed and multi-item cases, H200, --cost-block; lognormal_H16_Sq1 65.7 -> 68.5 % of
// copy, kimi_lognormal_B64_Sq4_H12 36.9 -> 40.8, uniform_B4_Sq4 46.6 -> 49.3,
// lognormal_H16_Sq4 57.5 -> 60.4, the other two within 0.6; bench/NOTES.md, v17).
// Above 64 rows (2-CTA clusters, the slot's cost the slower CTA's), fitted the same way
// (772 slots of six cases): 1.22 us per block, 8.25 per item; on
// kimi_lognormal_B32_Sq4_H96 (384 rows) 498.6 / 494.9 / 497.4 -> 458.5 / 457.2 / 465.5 us
// (busy max/mean 1.12-1.17 -> 1.05-1.07), three alternated runs.
// per_split at 32 ns per row (bf16 partials) against 64: three alternated rounds on six
// split 64-row cases, -0.5..-1.6 % each but skew_Sq4 (level), e.g. kimi_lognormal_B64_Sq4_H12
// 73.2 / 74.7 -> 72.0 / 72.9 us (bench/NOTES.md v36).
// Tiles of at most 16 rows: an item at 5000 ns, not 3000 (v63). A least-squares fit of
// 1,938 CTAs' busy times (three runs of five page-64 cases, the kernels of v62) gave 1.06 us
// a block and 5.3 an item: at 3000 the multi-item slots were the late ones (skew_Sq1's
// slots of two short requests 43.3 us against 39.6 for a long piece; busy max/mean
// 1.10-1.14). Four alternated rounds, 3000 / 4000 / 5000: skew_Sq1 53.7 / 51.9 / 52.6 us,
// lognormal_H16_Sq1 172.7 / 172.2 / 169.3, its d_qk 512 form 156.4 / 155.3 / 153.1;
// B64_L32768 and pages 16 / 32 within 0.4 %. (v60: 1500 and 750 were slower on the
// lognormal batches.) The per-block tiles of at most 16 rows measured level at 4000 / 5000.
KBMLA_HD CostModel sm90_fp8_cost_model(int rows) {
  return sm90_cost_model_by_rows(rows, {1000, 5000}, {1400, 8300}, {1220, 8250}, 32);
}

// The fp8 kernel with per-block scales: 1000 / 3000 up to 16 rows; its 17..64-row
// tiles stream at about the bf16 rate per block (their consumers limit, bench/NOTES.md).
// Its clusters (above 64 rows): 2.12 / 9.09 fitted; kimi_lognormal_B32_Sq4_H96 784.3 /
// 785.4 / 787.3 -> 764.4 / 768.5 / 766.5 us.
KBMLA_HD CostModel sm90_fp8_block_cost_model(int rows) {
  return sm90_cost_model_by_rows(rows, {1000, 3000}, {2200, 8600}, {2120, 9090}, 32);
}

struct PlanShape {
  int batch = 1;
  int q_len = 1;
  int heads = 1;
  bool causal = true;
  int tile_rows = 64;     // rows of one q tile (all CTAs of its cluster together)
  int cluster_size = 1;   // CTAs per cluster; each takes tile_rows / cluster_size rows
  int kv_block = 64;      // tokens per KV block (the planner's unit of splitting)
  int num_ctas = 132;     // CTA budget; G = num_ctas / cluster_size cluster slots
  CostModel cost = kDefaultCostModel;
  // Launch every slot (work-list column stride G) instead of only those with work. Plans
  // made on the device use it: their grid is fixed when a CUDA graph is captured.
  bool fixed_grid = false;
  // Batch-invariant plans (> 0): every request is cut into pieces of this many KV blocks
  // (at least ceil(blocks / 256)), chosen from its own length only, so its output does not
  // depend on the rest of the batch; the pieces are then placed, whole, to balance.
  int fixed_split_blocks = 0;
};

enum PlanStatus : int {
  kPlanOk = 0,
  kPlanNegativeSeqlen = 1,     // some seqlens[b] < 0
  kPlanCapacityTooSmall = 2,   // an output buffer is smaller than the counts require
  kPlanListTooLong = 3,        // the work list would exceed 2^31 - 1 entries
};

struct PlanCounts {
  int status = kPlanOk;
  int bad_index = -1;          // the request that caused a status other than kPlanOk
  int num_clusters = 0;        // G, the cluster slots of the CTA budget
  int num_active_clusters = 0; // slots that hold work: the decode launches these only, and
                               // the work list's column stride is this count
  int num_q_tiles = 0;         // T
  int64_t cap = 0;             // the per-slot cost limit the fill used
  bool whole_requests = false; // the fill's form (see fill): no cuts, q tiles spread
  int max_items_per_cluster = 0;
  int work_list_len = 0;       // active slots * (max_items_per_cluster + 1)
  int num_items = 0;
  int num_pieces = 0;          // sum of num_splits
  int num_bounds = 0;          // sum of (num_splits + 1) over requests with work
  int num_slots = 0;           // partial-output slots (requests with > 1 split)
  int num_zero_fill = 0;       // q tiles with no visible key
};

struct PlanBuffers {
  int32_t* work_list = nullptr;
  int work_list_capacity = 0;
  int32_t* num_splits = nullptr;      // [batch]
  int32_t* first_slot = nullptr;      // [batch]
  int32_t* bounds_offset = nullptr;   // [batch]
  int32_t* bounds = nullptr;
  int bounds_capacity = 0;
  int32_t* zero_fill = nullptr;       // entries (q_tile, batch, split 0)
  int zero_fill_capacity = 0;
  int64_t* cluster_cost = nullptr;    // optional [G]
};

namespace plan_detail {

KBMLA_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }
KBMLA_HD int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// a / b for 0 <= a, 0 < b; 32-bit when both fit (a 64-bit division is a long software
// sequence on the GPU, and the fill's cut loop divides once per piece). Same result.
KBMLA_HD int64_t div_nonneg64(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return int64_t{uint32_t(a) / uint32_t(b)};
  return a / b;
}

// First q tile whose rows see at least one key; T when none does.
KBMLA_HD int first_visible_tile(const PlanShape& p, int seqlen, int num_tiles) {
  if (seqlen <= 0) return num_tiles;
  if (!p.causal || seqlen >= p.q_len) return 0;
  // Token i sees seqlen - q_len + i + 1 keys: the first seeing one is q_len - seqlen.
  int first_token = p.q_len - seqlen;
  return (first_token * p.heads) / p.tile_rows;
}

struct RequestInfo {
  int blocks;        // nb
  int first_tile;    // t0
  int tiles;         // T - t0, tiles with items
  int min_piece;     // smallest split, in blocks: ceil(nb / 256), at least 1
};

KBMLA_HD RequestInfo request_info(const PlanShape& p, int seqlen, int num_tiles) {
  RequestInfo r{};
  r.blocks = seqlen > 0 ? ceil_div(seqlen, p.kv_block) : 0;
  r.first_tile = first_visible_tile(p, seqlen, num_tiles);
  r.tiles = num_tiles - r.first_tile;
  if (r.blocks == 0) r.tiles = 0;
  r.min_piece = r.blocks > 0 ? ceil_div(r.blocks, kMaxSplitsPerRequest) : 1;
  return r;
}

// What the fill reads of request b: its RequestInfo and the cost terms that depend on it
// alone (not on the cap), so a planner may compute them once per request (the device
// planner does, in parallel, into shared memory) instead of in every pass of every probe.
struct RequestTerms {
  RequestInfo r;
  int64_t tile_cost;       // one q tile of the whole request: blocks * per_kv_block + per_item
  int64_t whole;           // all its tiles: tiles * tile_cost
  int64_t piece_overhead;  // per piece of a cut request: tiles * (per_item + per_split)
  int64_t block_cost;      // per KV block of a piece: tiles * per_kv_block
  FastDivmod per_block;    // block_cost as a divisor (when fast_division)
  bool fast_division;      // per_block is set: block_cost is in [1, 2^31) and the terms were staged
};
// The KV blocks whose cost fits `space` (>= 0): space / block_cost, by a multiply-high
// when both are below 2^31 (exact there: FastDivmod), else by division. The fill's cut
// takes one per piece, nearly one per request of a batch spread over its slots (ncu of
// the device planner: the 32-bit division was ~17 dependent instructions a request).
// Both forms give the same quotient, so staged and on-the-fly terms plan the same bytes.
KBMLA_HD int64_t blocks_within(const RequestTerms& t, int64_t space) {
  if (t.fast_division && space < (int64_t{1} << 31)) return t.per_block.div(int32_t(space));
  return div_nonneg64(space, t.block_cost);
}
// staged: also set the divisor (worth its set-up only where the terms are computed once).
KBMLA_HD RequestTerms request_terms(const PlanShape& p, int seqlen, int num_tiles, bool staged = false) {
  RequestTerms t;
  t.r = request_info(p, seqlen, num_tiles);
  const int64_t nt = t.r.tiles;
  t.tile_cost = int64_t{t.r.blocks} * p.cost.per_kv_block + p.cost.per_item;
  t.whole = nt * t.tile_cost;
  t.piece_overhead = nt * (p.cost.per_item + p.cost.per_split);
  t.block_cost = nt * p.cost.per_kv_block;
  t.fast_division = staged && t.block_cost > 0 && t.block_cost < (int64_t{1} << 31);
  if (t.fast_division) t.per_block = FastDivmod(int32_t(t.block_cost));
  return t;
}

// The requests as the planner passes see them: each seqlen, and its terms computed on the
// fly (the host; the device planner's fallback for batches too large to stage).
struct SeqlenRequests {
  const PlanShape* p;
  const int32_t* seqlens;
  int num_tiles;
  KBMLA_HD int seqlen(int b) const { return seqlens[b]; }
  KBMLA_HD RequestTerms terms(int b) const { return request_terms(*p, seqlens[b], num_tiles); }
};
// Terms computed beforehand (request_terms of the same seqlens and shape, staged: the same
// values, and a multiply-high for the cut's division).
struct StagedRequests {
  const int32_t* seqlens;
  const RequestTerms* staged;
  KBMLA_HD int seqlen(int b) const { return seqlens[b]; }
  KBMLA_HD RequestTerms terms(int b) const { return staged[b]; }
};

// Counts, and optionally writes, one fill at capacity `cap`. Returns false when the
// requests do not fit the G slots at this cap. Two forms:
//  - cuts allowed (the default): a piece of a request carries all its q tiles, in one
//    slot; a request that does not fit the current slot is cut there;
//  - whole requests (`whole_requests`): no cuts, and each q tile of a request is its own
//    unit, so a request's tiles may go to different slots. The planner takes this form
//    when it fits within 1/16 of the least cap with cuts (plan_search): measured,
//    uniform batches were cut to gain ~3 % of modelled balance and lost up to 16 % to
//    partial-O writes and the combine (bench/NOTES.md, v7, v8).
struct FillState {
  int cluster = 0;
  int64_t load = 0;
};

// Sinks receive, in the cut form, piece() per (q tile, split) with its bounds and
// request_done() per request in order; in the whole-request form, whole_request() and
// request_done() per request in order, then item() per q tile unit in placement order.
struct NullSink {
  KBMLA_HD void piece(int, int, const RequestInfo&, int, int, int, int) {}
  KBMLA_HD void whole_request(int, const RequestInfo&) {}
  KBMLA_HD void item(int, int, int) {}
  KBMLA_HD void request_done(int, const RequestInfo&, int) {}
  KBMLA_HD void cluster_done(int, int64_t) {}
};

// kJump: the slots a long request fills completely are taken in one step (the same
// pieces, clusters and loads as the slot-by-slot loop, which kJump = false keeps as the
// tests' oracle): a fill for one request of 2,048 blocks on 132 slots is then O(1) before
// its pieces are emitted, instead of 132 iterations each with a division.
template <class Sink, bool kJump = true, class Requests>
KBMLA_HD bool fill(const PlanShape& p, const Requests& reqs, int num_tiles, int num_clusters, int64_t cap,
                   bool whole_requests, Sink& sink) {
  FillState st;
  if (whole_requests) {
    for (int b = 0; b < p.batch; ++b) {
      const RequestInfo r = reqs.terms(b).r;
      const bool work = r.blocks > 0 && r.tiles > 0;
      if (work) sink.whole_request(b, r);
      sink.request_done(b, r, work ? 1 : 0);
    }
    // Tile-major: tile t of every request before tile t + 1 of any, so the q tiles of one
    // request run at the same time in different slots and share its KV through L2 (as
    // the static schedulers' order does), instead of re-reading it one after another.
    for (int t = 0; t < num_tiles; ++t) {
      for (int b = 0; b < p.batch; ++b) {
        const RequestTerms q = reqs.terms(b);
        const RequestInfo& r = q.r;
        if (r.blocks == 0 || r.tiles == 0 || t < r.first_tile) continue;
        const int64_t cost = q.tile_cost;
        if (st.load > 0 && st.load + cost > cap) {
          sink.cluster_done(st.cluster, st.load);
          ++st.cluster;
          st.load = 0;
        }
        if (st.cluster >= num_clusters || cost > cap) return false;
        sink.item(st.cluster, b, t);
        st.load += cost;
      }
    }
    if (st.load > 0) sink.cluster_done(st.cluster, st.load);
    return true;
  }
  for (int b = 0; b < p.batch; ++b) {
    const RequestTerms q = reqs.terms(b);
    const RequestInfo& r = q.r;
    if (r.blocks == 0 || r.tiles == 0) {
      sink.request_done(b, r, 0);
      continue;
    }
    const int64_t whole = q.whole;
    const int64_t piece_overhead = q.piece_overhead;
    const int64_t block_cost = q.block_cost;  // tiles x per_kv_block
    auto emit = [&](int split, int begin, int end) {
      for (int t = r.first_tile; t < num_tiles; ++t) sink.piece(st.cluster, b, r, t, split, begin, end);
    };
    if (p.fixed_split_blocks > 0) {  // batch-invariant: cuts from the request's length only
      const int chunk = p.fixed_split_blocks > r.min_piece ? p.fixed_split_blocks : r.min_piece;
      const int pieces = ceil_div(r.blocks, chunk);
      for (int k = 0; k < pieces; ++k) {
        const int begin = k * chunk, end = begin + chunk < r.blocks ? begin + chunk : r.blocks;
        const int64_t cost = pieces > 1 ? piece_overhead + (end - begin) * block_cost : whole;
        if (st.load > 0 && st.load + cost > cap) {
          sink.cluster_done(st.cluster, st.load);
          ++st.cluster;
          st.load = 0;
        }
        if (st.cluster >= num_clusters || cost > cap) return false;
        emit(k, begin, end);
        st.load += cost;
      }
      sink.request_done(b, r, pieces);
      continue;
    }
    int split = 0;
    int begin = 0;
    for (;;) {
      if (st.cluster >= num_clusters) return false;
      if (split == 0 && st.load + whole <= cap) {
        emit(0, 0, r.blocks);
        st.load += whole;
        split = 1;
        break;
      }
      const int remaining = r.blocks - begin;
      const int64_t space = cap - st.load - piece_overhead;
      const int64_t fit = space >= 0 ? blocks_within(q, space) : 0;
      if (kJump && st.load == 0 && fit >= r.min_piece && fit < remaining) {
        // An empty slot that cannot take the rest: this and the next n - 1 slots each take
        // `fit` blocks, the rest (at most `fit`) goes to slot n, as the loop would do.
        const int f = static_cast<int>(fit);
        const int n = (remaining + f - 1) / f - 1;  // full slots, >= 1
        if (split + n >= kMaxSplitsPerRequest) return false;  // the loop fails at an empty slot
        if (st.cluster + n >= num_clusters) return false;
        if constexpr (requires { sink.full_slots(0, 0, 0); }) {
          // A sink that only counts takes the n slots' pieces at once (the device planner's
          // probes count, and a long request's slots would otherwise cost a step each).
          sink.full_slots(st.cluster, n, r.tiles);
          st.cluster += n;
        } else {
          for (int i = 0; i < n; ++i) {
            emit(split + i, begin + i * f, begin + (i + 1) * f);
            sink.cluster_done(st.cluster, piece_overhead + f * block_cost);
            ++st.cluster;
          }
        }
        split += n;
        begin += n * f;
        const int last = r.blocks - begin;
        emit(split, begin, r.blocks);
        st.load = piece_overhead + last * block_cost;
        ++split;
        break;
      }
      if (split > 0 && fit >= remaining) {
        emit(split, begin, r.blocks);
        st.load += piece_overhead + remaining * block_cost;
        ++split;
        break;
      }
      if (fit >= r.min_piece && fit < remaining && split + 1 < kMaxSplitsPerRequest) {
        const int k = static_cast<int>(fit);
        emit(split, begin, begin + k);
        st.load += piece_overhead + k * block_cost;
        ++split;
        begin += k;
      } else if (st.load == 0) {
        return false;  // not even a minimal piece fits an empty slot: cap too small
      }
      sink.cluster_done(st.cluster, st.load);
      ++st.cluster;
      st.load = 0;
    }
    sink.request_done(b, r, split);
  }
  if (st.load > 0) {
    if (st.cluster >= num_clusters) return false;
    sink.cluster_done(st.cluster, st.load);
  }
  return true;
}

// Counts items per slot and the table sizes (second pass of the plan).
struct CountSink {
  int current_cluster = -1;
  int items_in_cluster = 0;
  PlanCounts* counts;
  KBMLA_HD explicit CountSink(PlanCounts* c) : counts(c) {}
  KBMLA_HD void item(int cluster, int, int) {
    if (cluster != current_cluster) {
      current_cluster = cluster;
      items_in_cluster = 0;
    }
    if (cluster + 1 > counts->num_active_clusters) counts->num_active_clusters = cluster + 1;
    ++items_in_cluster;
    ++counts->num_items;
    if (items_in_cluster > counts->max_items_per_cluster) counts->max_items_per_cluster = items_in_cluster;
  }
  KBMLA_HD void piece(int cluster, int b, const RequestInfo&, int tile, int, int, int) { item(cluster, b, tile); }
  // What `tiles` piece() calls on each of the n empty slots from cluster0 on would count.
  KBMLA_HD void full_slots(int cluster0, int n, int tiles) {
    if (n <= 0 || tiles <= 0) return;
    if (cluster0 + n > counts->num_active_clusters) counts->num_active_clusters = cluster0 + n;
    counts->num_items += n * tiles;
    if (tiles > counts->max_items_per_cluster) counts->max_items_per_cluster = tiles;
    current_cluster = cluster0 + n - 1;
    items_in_cluster = tiles;
  }
  KBMLA_HD void whole_request(int, const RequestInfo&) {}
  KBMLA_HD void request_done(int, const RequestInfo& r, int splits) {
    counts->num_pieces += splits;
    if (splits > 0) counts->num_bounds += splits + 1;
    if (splits > 1) counts->num_slots += splits;
    counts->num_zero_fill += r.tiles == 0 ? counts->num_q_tiles : r.first_tile;
  }
  KBMLA_HD void cluster_done(int, int64_t) {}
};

// Writes the work list, split table and zero-fill list (third pass).
struct WriteSink {
  const PlanShape* p;
  const PlanCounts* counts;
  PlanBuffers* out;
  int current_cluster = -1;
  int items_in_cluster = 0;
  int bounds_used = 0;
  int slots_used = 0;
  int zero_fill_used = 0;
  KBMLA_HD void entry(int cluster, int b, int tile, int split) {
    if (cluster != current_cluster) {
      current_cluster = cluster;
      items_in_cluster = 0;
    }
    out->work_list[cluster + items_in_cluster * counts->num_active_clusters] = make_work_entry(tile, b, p->batch, split);
    ++items_in_cluster;
  }
  KBMLA_HD void item(int cluster, int b, int tile) { entry(cluster, b, tile, 0); }
  KBMLA_HD void piece(int cluster, int b, const RequestInfo& r, int tile, int split, int begin, int end) {
    entry(cluster, b, tile, split);
    if (tile != r.first_tile) return;  // the request's other tiles share these bounds
    if (split == 0) out->bounds_offset[b] = bounds_used;
    out->bounds[bounds_used + split] = begin;
    out->bounds[bounds_used + split + 1] = end;
  }
  KBMLA_HD void whole_request(int b, const RequestInfo& r) {
    out->bounds_offset[b] = bounds_used;
    out->bounds[bounds_used] = 0;
    out->bounds[bounds_used + 1] = r.blocks;
  }
  KBMLA_HD void request_done(int b, const RequestInfo& r, int splits) {
    out->num_splits[b] = splits;
    out->first_slot[b] = splits > 1 ? slots_used : -1;
    if (splits > 1) slots_used += splits;
    if (splits > 0) {
      bounds_used += splits + 1;
    } else {
      out->bounds_offset[b] = bounds_used;
    }
    const int zero_tiles = r.tiles == 0 ? counts->num_q_tiles : r.first_tile;
    for (int t = 0; t < zero_tiles; ++t) out->zero_fill[zero_fill_used++] = make_work_entry(t, b, p->batch, 0);
  }
  KBMLA_HD void cluster_done(int cluster, int64_t load) {
    if (out->cluster_cost != nullptr) out->cluster_cost[cluster] = load;
  }
};

}  // namespace plan_detail

}  // namespace kbmla
