// The device planner's fill, one step per cluster slot instead of one per request.
//
// fill() (planner_core.hpp) pours requests into slots in index order. Between two slot
// boundaries it only places whole requests (cut form) or whole q tile units (whole form),
// each taken while the slot's load plus its cost stays within the cap: with the costs'
// prefix sums that run ends at the last prefix within the cap, which a search finds
// (32 lanes of a warp compare 32 candidates at once on the device, so a run of up to 1024
// requests takes two steps). What happens at the boundary (a cut, a jump over slots a long
// request fills, a failure) is fill()'s own code, statement for statement. So a walk makes
// the same decisions as fill(), counts the same (WalkCounter against CountSink) and writes
// the same bytes (WalkWriter against WriteSink), in about as many steps as there are slots.
// The CPU tests compare both with fill() over random batches and caps; fill() stays the
// host planner and the oracle.
//
// Parallel writes: a counting walk (or fill(), for the whole form) can record where each
// of its slots starts (CutStep, slot_starts); from the record made at the plan's cap every
// request (cut form: write_request_from_steps) or q tile unit (whole form:
// write_unit_from_starts) writes its own entries, independently of the others.
//
// Not covered (the device planner runs fill() there): batch-invariant plans
// (fixed_split_blocks), and the whole form when a request with work has q tiles without
// a visible key (first_tile > 0: its units are not the same in every tile pass).
#pragma once

#include <cstdint>

#include "kbmla/hd.hpp"
#include "kbmla/planner_core.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla::plan_detail {

// Exclusive prefix sums over the batch, B + 1 entries each ("with work": blocks > 0 and
// tiles > 0, the requests fill() places).
struct BatchPrefix {
  const int64_t* whole;      // RequestTerms::whole
  const int64_t* tile_cost;  // RequestTerms::tile_cost of requests with work (whole form)
  const int32_t* tiles;      // RequestInfo::tiles of requests with work
  const int32_t* work;       // requests with work
};

KBMLA_HD bool has_work(const RequestInfo& r) { return r.blocks > 0 && r.tiles > 0; }

// The host's search: the largest j in [lo, hi] with at(j) <= x, for a nondecreasing at()
// with at(lo) <= x (the device's WarpSearch answers the same).
struct BinarySearch {
  template <class At>
  KBMLA_HD int last_at_most(int lo, int hi, int64_t x, const At& at) const {
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (at(mid) <= x) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
};

// Where a walk puts its pieces. Calls, in fill()'s order:
//   run(c, b, j): requests [b, j) placed whole in slot c (some may have no work);
//   piece(c, b, r, split, begin, end): one piece of request b (all its q tiles) in slot c;
//   full_slots(c, n, b, r, split, begin, f): slots c..c+n-1 each take one piece of f blocks
//       (pieces split.., from block begin on);
//   cut_done(b, r, splits): request b, placed in pieces, is complete;
//   units(c, u, v, prefix): whole form, q tile units [u, v) (tile-major) in slot c.

// Cut form (fill() with whole_requests false, fixed_split_blocks 0).
// (Prefixes and requests by value, so that on the device their pointers stay in registers
// instead of being read through the caller's stack frame at every step.)
// fill()'s loop for request b, which has work and does not fit whole at `load` in slot
// c < G: a cut here (or none), then the rest from an empty slot. Moves c and load on.
enum BoundaryResult : int { kBoundaryFails, kBoundaryDone, kBoundaryAgain };
template <class Requests, class Out>
KBMLA_HD BoundaryResult cut_boundary(const Requests& reqs, int num_clusters, int64_t cap, int b, int& c,
                                     int64_t& load, Out& out) {
  const int G = num_clusters;
  const RequestTerms q = reqs.terms(b);
  const RequestInfo& r = q.r;
  int split = 0;
  int begin = 0;
  if (load > 0) {
    const int64_t space = cap - load - q.piece_overhead;
    const int64_t fit = space >= 0 ? blocks_within(q, space) : 0;
    if (fit >= r.min_piece && fit < r.blocks && 1 < kMaxSplitsPerRequest) {
      out.piece(c, b, r, 0, 0, static_cast<int>(fit));
      split = 1;
      begin = static_cast<int>(fit);
    }
    ++c;  // the slot closes
    load = 0;
    if (split == 0) return kBoundaryAgain;  // b starts again at the next, empty slot
    if (c >= G) return kBoundaryFails;
  }
  // Request b at an empty slot, `split` pieces placed, the rest from block `begin`.
  const int remaining = r.blocks - begin;
  const int64_t space = cap - q.piece_overhead;
  const int64_t fit = space >= 0 ? blocks_within(q, space) : 0;
  if (fit >= r.min_piece && fit < remaining) {
    // fill()'s kJump: this and the next n - 1 slots take `fit` blocks each, the rest
    // (at most `fit`) goes to slot c + n.
    const int f = static_cast<int>(fit);
    const int n = (remaining + f - 1) / f - 1;
    if (split + n >= kMaxSplitsPerRequest) return kBoundaryFails;
    if (c + n >= G) return kBoundaryFails;
    out.full_slots(c, n, b, r, split, begin, f);
    c += n;
    split += n;
    begin += n * f;
    out.piece(c, b, r, split, begin, r.blocks);
    load = q.piece_overhead + int64_t{r.blocks - begin} * q.block_cost;
    ++split;
  } else if (split > 0 && fit >= remaining) {
    out.piece(c, b, r, split, begin, r.blocks);
    load = q.piece_overhead + int64_t{remaining} * q.block_cost;
    ++split;
  } else {
    return kBoundaryFails;  // not even a minimal piece fits an empty slot
  }
  out.cut_done(b, r, split);
  return kBoundaryDone;
}

// Cut form (fill() with whole_requests false, fixed_split_blocks 0). Each step is a run of
// whole requests from b, then the request that ends it (out.step(b, c, load) first).
// (Prefixes and requests by value, so that on the device their pointers stay in registers
// instead of being read through the caller's stack frame at every step.)
template <class Requests, class Search, class Out>
KBMLA_HD bool walk_cut(const PlanShape& p, const Requests reqs, const BatchPrefix pre, int num_clusters, int64_t cap,
                       const Search& search, Out& out) {
  const int B = p.batch;
  const int G = num_clusters;
  int b = 0;
  int c = 0;
  int64_t load = 0;
  while (b < B) {
    out.step(b, c, load);
    // The requests from b on that fit whole: while load + whole[b, j) <= cap.
    const int j = search.last_at_most(b, B, cap - load + pre.whole[b], [&](int i) { return pre.whole[i]; });
    if (j > b) {
      if (pre.work[j] > pre.work[b]) {
        if (c >= G) return false;
        load += pre.whole[j] - pre.whole[b];
      }
      out.run(c, b, j);
      b = j;
      if (b == B) break;
    }
    // Request b has work and does not fit whole at this load (fill()'s loop from here).
    if (c >= G) return false;
    const BoundaryResult result = cut_boundary(reqs, G, cap, b, c, load, out);
    if (result == kBoundaryFails) return false;
    if (result == kBoundaryDone) ++b;
  }
  return true;
}

// Whole form's units: unit u = t * B + b is q tile t of request b (tile-major, as fill()
// places them); with every first_tile 0 its cost is request b's tile_cost whatever t, so
// the prefix over units is t * (all tile costs) + the prefix within the tile.
struct UnitPrefix {
  BatchPrefix pre;
  int batch;
  FastDivmod by_batch;  // (unit indices are below 2^23: exact)
  KBMLA_HD UnitPrefix(const BatchPrefix& p, int b) : pre(p), batch(b), by_batch(b) {}
  KBMLA_HD int64_t cost(int u) const {
    const int t = by_batch.div(u);
    return int64_t{t} * pre.tile_cost[batch] + pre.tile_cost[u - t * batch];
  }
  KBMLA_HD int work(int u) const {
    const int t = by_batch.div(u);
    return t * pre.work[batch] + pre.work[u - t * batch];
  }
};

// Whole form (fill() with whole_requests true), when no request with work has
// first_tile > 0. Each slot starts empty and takes the longest run of units that fits.
template <class Search, class Out>
KBMLA_HD bool walk_whole(const PlanShape& p, const BatchPrefix pre, int num_tiles, int num_clusters, int64_t cap,
                         const Search& search, Out& out) {
  const UnitPrefix units(pre, p.batch);
  const int U = num_tiles * p.batch;  // (validated: at most 2^23)
  int u = 0;
  for (int c = 0; u < U; ++c) {
    const int v = search.last_at_most(u, U, cap + units.cost(u), [&](int i) { return units.cost(i); });
    const bool placed = units.work(v) > units.work(u);
    if (placed) {
      if (c >= num_clusters) return false;
      out.units(c, u, v, units);
    }
    if (v == U) break;
    if (!placed) return false;  // unit v (with work) exceeds the cap on its own
    u = v;
  }
  return true;
}

// Where a cut-form step started: its first request, slot and load, and the writer's
// bookkeeping there (items already in the slot, bounds and partial slots used before it).
// From these, each request's writes are independent (write_request_from_steps).
struct CutStep {
  int32_t b, c, in_slot, bounds_used, slots_used, unused;
  int64_t load;
};

// Counts as CountSink does (the fields a fill counts; num_zero_fill and, in the whole
// form, the pieces and bounds do not depend on the cap: the caller adds them).
// Its counts are a member (registers on the device), copied out by the caller.
struct WalkCounter {
  BatchPrefix pre;
  PlanCounts counts;
  int batch = 1;
  CutStep* steps = nullptr;  // optional: each cut-form step's start (write_request_from_steps)
  int max_steps = 0;         // steps' capacity; G + 1 holds every walk (each step but the last closes a slot)
  int num_steps = 0;
  int current = -1;
  int in_slot = 0;
  KBMLA_HD void step(int b, int c, int64_t load) {
    if (steps != nullptr && num_steps < max_steps) {
      steps[num_steps] = {b, c, c == current ? in_slot : 0, counts.num_bounds, counts.num_slots, 0, load};
    }
    ++num_steps;
  }
  KBMLA_HD void add(int c, int n) {
    if (n <= 0) return;
    if (c != current) {
      current = c;
      in_slot = 0;
    }
    in_slot += n;
    counts.num_items += n;
    if (in_slot > counts.max_items_per_cluster) counts.max_items_per_cluster = in_slot;
    if (c + 1 > counts.num_active_clusters) counts.num_active_clusters = c + 1;
  }
  KBMLA_HD void run(int c, int b, int j) {
    const int w = pre.work[j] - pre.work[b];
    add(c, pre.tiles[j] - pre.tiles[b]);
    counts.num_pieces += w;
    counts.num_bounds += 2 * w;
  }
  KBMLA_HD void piece(int c, int, const RequestInfo& r, int, int, int) { add(c, r.tiles); }
  KBMLA_HD void full_slots(int c, int n, int, const RequestInfo& r, int, int, int) {
    if (n <= 0 || r.tiles <= 0) return;
    if (c + n > counts.num_active_clusters) counts.num_active_clusters = c + n;
    counts.num_items += n * r.tiles;
    if (r.tiles > counts.max_items_per_cluster) counts.max_items_per_cluster = r.tiles;
    current = c + n - 1;
    in_slot = r.tiles;
  }
  KBMLA_HD void cut_done(int, const RequestInfo&, int splits) {
    counts.num_pieces += splits;
    if (splits > 0) counts.num_bounds += splits + 1;
    if (splits > 1) counts.num_slots += splits;
  }
  // Optional (whole form): each slot's first unit (write_unit_from_starts); num_steps: the slots.
  int32_t* slot_starts = nullptr;
  KBMLA_HD void units(int c, int u, int v, const UnitPrefix& up) {
    add(c, up.work(v) - up.work(u));
    if (slot_starts != nullptr) slot_starts[c] = u;
    num_steps = c + 1;
  }
};

// CountSink for fill()'s whole form that also records each slot's first unit, as
// WalkCounter does (fill() places a slot's units in order, and every slot it closes holds
// some): the device planner's whole-form probes where it does not walk.
struct SlotStartSink : CountSink {
  int32_t* slot_starts;
  int batch;
  int num_slots_used = 0;
  KBMLA_HD SlotStartSink(PlanCounts* c, int32_t* starts, int b) : CountSink(c), slot_starts(starts), batch(b) {}
  KBMLA_HD void item(int cluster, int b, int tile) {
    if (cluster != current_cluster) {
      slot_starts[cluster] = tile * batch + b;
      num_slots_used = cluster + 1;
    }
    CountSink::item(cluster, b, tile);
  }
};

// Writes as WriteSink does, the work list's entries and the split table, with `lanes`
// writers (lane `lane` of them takes every lanes-th entry of a run; 1 and 0 on the host).
// Every lane keeps the same scalar state. Not written here (the caller does it, in
// parallel): the work list's kNoWork fill, the zero-fill list, and in the whole form the
// per-request table (whole_form_request below).
template <class Requests>
struct WalkWriter {
  const PlanShape* p;
  Requests reqs;
  BatchPrefix pre;
  int active_clusters;  // the work list's column stride (PlanCounts::num_active_clusters)
  PlanBuffers out;
  int32_t* splits_copy;  // optional [batch]: num_splits again (the device keeps one in shared memory)
  int lane = 0;
  int lanes = 1;
  int num_tiles = 1;
  int current = -1;
  int in_slot = 0;
  int bounds_used = 0;
  int slots_used = 0;

  KBMLA_HD void step(int, int, int64_t) {}
  KBMLA_HD int slot_index(int c) {  // the slot's next item index, as WriteSink counts it
    if (c != current) {
      current = c;
      in_slot = 0;
    }
    return in_slot;
  }
  KBMLA_HD void entry_at(int c, int index, int b, int tile, int split) {
    out.work_list[c + index * active_clusters] = make_work_entry(tile, b, p->batch, split);
  }
  KBMLA_HD void set_splits(int b, int splits, int first_slot) {
    out.num_splits[b] = splits;
    out.first_slot[b] = first_slot;
    if (splits_copy != nullptr) splits_copy[b] = splits;
  }
  KBMLA_HD void run(int c, int b, int j) {
    const int at = slot_index(c);
    for (int i = b + lane; i < j; i += lanes) {
      const RequestInfo r = reqs.terms(i).r;
      const int bo = bounds_used + 2 * (pre.work[i] - pre.work[b]);
      out.bounds_offset[i] = bo;
      if (!has_work(r)) {
        set_splits(i, 0, -1);
        continue;
      }
      const int first = at + pre.tiles[i] - pre.tiles[b];
      for (int t = r.first_tile; t < num_tiles; ++t) entry_at(c, first + t - r.first_tile, i, t, 0);
      out.bounds[bo] = 0;
      out.bounds[bo + 1] = r.blocks;
      set_splits(i, 1, -1);
    }
    in_slot += pre.tiles[j] - pre.tiles[b];
    bounds_used += 2 * (pre.work[j] - pre.work[b]);
  }
  KBMLA_HD void piece(int c, int b, const RequestInfo& r, int split, int begin, int end) {
    const int at = slot_index(c);
    for (int t = r.first_tile + lane; t < num_tiles; t += lanes) entry_at(c, at + t - r.first_tile, b, t, split);
    in_slot += r.tiles;
    if (lane == 0) {
      if (split == 0) out.bounds_offset[b] = bounds_used;
      out.bounds[bounds_used + split] = begin;
      out.bounds[bounds_used + split + 1] = end;
    }
  }
  KBMLA_HD void full_slots(int c, int n, int b, const RequestInfo& r, int split, int begin, int f) {
    const int per_slot = r.tiles;
    for (int k = lane; k < n * per_slot; k += lanes) {
      const int i = k / per_slot;
      const int t = r.first_tile + (k - i * per_slot);
      entry_at(c + i, t - r.first_tile, b, t, split + i);
    }
    for (int i = lane; i < n; i += lanes) {
      out.bounds[bounds_used + split + i] = begin + i * f;
      out.bounds[bounds_used + split + i + 1] = begin + (i + 1) * f;
    }
    if (lane == 0 && split == 0) out.bounds_offset[b] = bounds_used;
    if (n > 0 && per_slot > 0) {
      current = c + n - 1;
      in_slot = per_slot;
    }
  }
  KBMLA_HD void cut_done(int b, const RequestInfo&, int splits) {
    if (lane == 0) set_splits(b, splits, splits > 1 ? slots_used : -1);
    if (splits > 1) slots_used += splits;
    bounds_used += splits + 1;
  }
  KBMLA_HD void units(int c, int u, int v, const UnitPrefix& up) {
    const int w0 = up.work(u);
    for (int k = u + lane; k < v; k += lanes) {
      const int t = up.by_batch.div(k);
      const int b = k - t * p->batch;
      if (!has_work(reqs.terms(b).r)) continue;
      entry_at(c, up.work(k) - w0, b, t, 0);
    }
  }
};

// Request i's writes in the cut form at `cap`, from the steps a WalkCounter recorded at that
// cap (steps[0].b is 0; the walk fitted): the last step starting at or before i placed it,
// whole in its run or as the request that ended the run, whose pieces the boundary code
// replays from the state the prefix sums give. Requests write in parallel on the device.
template <class Requests>
KBMLA_HD void write_request_from_steps(const PlanShape& p, const Requests reqs, const BatchPrefix pre,
                                       const CutStep* steps, int num_steps, int num_clusters, int64_t cap,
                                       int active_clusters, int num_tiles, const PlanBuffers out,
                                       int32_t* splits_copy, int i) {
  int lo = 0, hi = num_steps - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (steps[mid].b <= i) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const CutStep st = steps[lo];
  WalkWriter<Requests> w{&p, reqs, pre, active_clusters, out, splits_copy, 0, 1, num_tiles};
  w.current = st.c;
  w.in_slot = st.in_slot + pre.tiles[i] - pre.tiles[st.b];
  w.bounds_used = st.bounds_used + 2 * (pre.work[i] - pre.work[st.b]);
  w.slots_used = st.slots_used;
  int64_t load = st.load + pre.whole[i] - pre.whole[st.b];
  if (load + (pre.whole[i + 1] - pre.whole[i]) <= cap) {
    w.run(st.c, i, i + 1);
    return;
  }
  int c = st.c;
  cut_boundary(reqs, num_clusters, cap, i, c, load, w);
}

// Whole form: unit k's work-list entry (if its request has work) from each slot's first
// unit, recorded at the plan's cap by a counting fill or walk (every request with work has
// first_tile 0, as UnitPrefix needs). Units write in parallel on the device.
template <class Requests>
KBMLA_HD void write_unit_from_starts(const PlanShape& p, const Requests reqs, const UnitPrefix& up,
                                     const int32_t* slot_starts, int num_slots, int active_clusters,
                                     const PlanBuffers out, int k) {
  const int t = up.by_batch.div(k);
  const int b = k - t * p.batch;
  if (!has_work(reqs.terms(b).r)) return;
  int lo = 0, hi = num_slots - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (slot_starts[mid] <= k) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int index = up.work(k) - up.work(slot_starts[lo]);
  out.work_list[lo + index * active_clusters] = make_work_entry(t, b, p.batch, 0);
}

// The whole form's per-request table (WriteSink's whole_request and request_done), which
// does not depend on the placement: request b's bounds sit at 2 x (requests with work
// before it).
template <class Requests>
KBMLA_HD void whole_form_request(const Requests reqs, const BatchPrefix pre, const PlanBuffers out, int32_t* splits_copy,
                                 int b) {
  const RequestInfo r = reqs.terms(b).r;
  const int bo = 2 * pre.work[b];
  out.bounds_offset[b] = bo;
  out.first_slot[b] = -1;
  const int splits = has_work(r) ? 1 : 0;
  out.num_splits[b] = splits;
  if (splits_copy != nullptr) splits_copy[b] = splits;
  if (splits) {
    out.bounds[bo] = 0;
    out.bounds[bo + 1] = r.blocks;
  }
}

// A request's zero-fill entries: its q tiles without a visible key.
KBMLA_HD int zero_fill_count(const RequestInfo& r, int num_tiles) { return r.tiles == 0 ? num_tiles : r.first_tile; }

// Request b's zero-fill entries, from position `at` (the count of such entries before b).
template <class Requests>
KBMLA_HD void zero_fill_request(const PlanShape& p, const Requests reqs, int num_tiles, const PlanBuffers out, int at,
                                int b) {
  const int zero_tiles = zero_fill_count(reqs.terms(b).r, num_tiles);
  for (int t = 0; t < zero_tiles; ++t) out.zero_fill[at + t] = make_work_entry(t, b, p.batch, 0);
}

// What one request adds to each of the walk's prefix sums (BatchPrefix) and to the
// zero-fill count before the next: the one rule for the host's StagedBatch and the device
// planner's block scan.
struct PrefixParts {
  int64_t whole = 0, tile_cost = 0;
  int32_t tiles = 0, work = 0, zero = 0;
  KBMLA_HD static PrefixParts of(const RequestTerms& t, int num_tiles) {
    PrefixParts x;
    const bool w = has_work(t.r);
    x.whole = t.whole;
    x.tile_cost = w ? t.tile_cost : 0;
    x.tiles = w ? t.r.tiles : 0;
    x.work = w ? 1 : 0;
    x.zero = zero_fill_count(t.r, num_tiles);
    return x;
  }
  KBMLA_HD void add(const PrefixParts& o) {
    whole += o.whole;
    tile_cost += o.tile_cost;
    tiles += o.tiles;
    work += o.work;
    zero += o.zero;
  }
  KBMLA_HD void sub(const PrefixParts& o) {
    whole -= o.whole;
    tile_cost -= o.tile_cost;
    tiles -= o.tiles;
    work -= o.work;
    zero -= o.zero;
  }
};

}  // namespace kbmla::plan_detail
