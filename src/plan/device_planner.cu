#include "src/plan/device_planner.hpp"

#include <climits>

#include "kbmla/error.hpp"
#include "src/plan/slot_walk.hpp"

// Phase timestamps for a tracing build (the harness that defines KBMLA_PLANNER_TRACE
// provides kbmla_planner_stamp, called by thread 0 at each phase's end).
#ifdef KBMLA_PLANNER_TRACE
#define KBMLA_PLANNER_STAMP() kbmla_planner_stamp()
#else
#define KBMLA_PLANNER_STAMP() \
  do {                        \
  } while (0)
#endif

namespace kbmla {

namespace {

using plan_detail::RequestTerms;

// One warp per probe, and one more for the extra fill of first_fitting_with.
constexpr int kPlannerWarps = kCapProbes + 1;
constexpr int kPlannerThreads = kPlannerWarps * 32;
static_assert(kPlannerThreads <= 1024, "one warp per probe in one CTA");
static_assert(sizeof(RequestTerms) == 64, "the staged batch size assumes 64-byte terms");

// The probes' records of where their slots start: a cut-form walk's steps (CutStep), a
// whole-form fill's or walk's first unit of each slot (int32). After each round the
// fitting record with the least cap so far is kept for each form, and the plan, whose cap
// is its form's least fitting one probed, is then written from it in parallel (request by
// request, unit by unit).
struct StepRecords {
  plan_detail::CutStep* per_warp;  // kPlannerWarps x stride (a whole-form record: int32s)
  plan_detail::CutStep* kept[2];   // stride each: [0] cut form, [1] whole form
  int* num_steps;                  // kPlannerWarps: the warp's record's length, or -1 (none, or its fill failed)
  int64_t* kept_cap;               // [2]: the kept record's cap (INT64_MAX: none)
  int* kept_steps;                 // [2]
  int stride;                      // G + 1 (every walk's steps fit)
};

// The K probes of a search round, one per warp: all 32 lanes of warp i evaluate probe i
// (the slot walk's search uses them; fill() runs on every lane alike, which costs the warp
// no more issue slots than one lane would), lane 0 stores the verdict and counts, the
// lowest warp that fits wins. Every thread keeps the same search state, so all call this
// the same number of times.
struct BlockProbes {
  int* verdict;         // shared, kPlannerWarps entries
  PlanCounts* counted;  // shared, kPlannerWarps entries: each probe's counts
  uint8_t* scratch;     // shared, kScratchBytes, 16-byte aligned: single()'s result
  const StepRecords* records;  // null: none kept
  static constexpr int kScratchBytes = 128;

  // Between a round's two barriers: for each form, the least-cap fitting record of the
  // warps that filled goes to its `kept` (all threads copy); thread 0 notes them after the
  // second barrier.
  __device__ void keep_best_records(bool extra_ran, int64_t (&cap)[2], int (&steps)[2]) const {
    int best[2] = {-1, -1};
    for (int f = 0; f < 2; ++f) cap[f] = records->kept_cap[f];
    for (int w = 0; w < kPlannerWarps; ++w) {
      const bool ran = w < kCapProbes || extra_ran;
      const int f = counted[w].whole_requests ? 1 : 0;
      if (ran && verdict[w] && records->num_steps[w] >= 0 && counted[w].cap < cap[f]) {
        cap[f] = counted[w].cap;
        best[f] = w;
      }
    }
    for (int f = 0; f < 2; ++f) {
      // (A record holds at most G + 1 entries, the stride: min() only keeps the copy in bounds.)
      steps[f] = best[f] >= 0 ? min(records->num_steps[best[f]], records->stride) : -1;
      if (best[f] < 0) continue;
      const plan_detail::CutStep* from = records->per_warp + best[f] * records->stride;
      if (f == 0) {
        for (int i = threadIdx.x; i < steps[f]; i += blockDim.x) records->kept[0][i] = from[i];
      } else {
        auto* to = reinterpret_cast<int32_t*>(records->kept[1]);
        for (int i = threadIdx.x; i < steps[f]; i += blockDim.x) to[i] = reinterpret_cast<const int32_t*>(from)[i];
      }
    }
  }

  // Thread 0 runs the sequential steps (the total) alone: with every warp running them, one
  // copy of a dependent chain per warp shared the SM's four schedulers.
  template <class F>
  __device__ auto single(F&& f) const {
    using T = decltype(f());
    static_assert(sizeof(T) <= kScratchBytes, "single(): result too large for the scratch");
    if (threadIdx.x == 0) {
      const T v = f();
      memcpy(scratch, &v, sizeof(T));
      KBMLA_PLANNER_STAMP();
    }
    __syncthreads();
    T v;
    memcpy(&v, scratch, sizeof(T));
    __syncthreads();
    return v;
  }

  // extra_cap >= 0: warp kCapProbes fills at it in the same round (the tight bound, the
  // whole form's limit: a pass fewer on the planner's critical path than a fill of its own).
  template <class Fits>
  __device__ int round(const CapSearch& s, Fits& fits, int64_t extra_cap, PlanCounts& winner, bool* extra_fits,
                       PlanCounts* extra) const {
    const int warp = int(threadIdx.x / 32);
    const bool lead = threadIdx.x % 32 == 0;
    if (warp < kCapProbes || extra_cap >= 0) {
      PlanCounts mine{};
      const bool ok = fits(warp < kCapProbes ? s.probe(warp) : extra_cap, mine);
      if (lead) {
        verdict[warp] = ok ? 1 : 0;
        counted[warp] = mine;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
    int first = kCapProbes;
    for (int i = kCapProbes - 1; i >= 0; --i) {
      if (verdict[i]) first = i;
    }
    if (first < kCapProbes) winner = counted[first];
    if (extra_fits != nullptr) {
      *extra_fits = verdict[kCapProbes] != 0;
      *extra = counted[kCapProbes];
    }
    int64_t kept_cap[2] = {0, 0};
    int kept_steps[2] = {-1, -1};
    if (records != nullptr) keep_best_records(extra_cap >= 0, kept_cap, kept_steps);
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int f = 0; f < 2; ++f) {
        if (kept_steps[f] < 0) continue;
        records->kept_cap[f] = kept_cap[f];
        records->kept_steps[f] = kept_steps[f];
      }
    }
    return first;
  }
  template <class Fits>
  __device__ int first_fitting(const CapSearch& s, Fits& fits, PlanCounts& winner) const {
    return round(s, fits, -1, winner, nullptr, nullptr);
  }
  template <class Fits>
  __device__ int first_fitting_with(const CapSearch& s, Fits& fits, int64_t extra_cap, RoundWhen, bool& extra_fits,
                                    PlanCounts& extra, PlanCounts& winner) const {
    return round(s, fits, extra_cap, winner, &extra_fits, &extra);
  }
};

// The slot walk's search on the device: the largest j in [lo, hi] with at(j) <= x (at()
// nondecreasing, at(lo) <= x), 32 candidates per step, one per lane; the lanes that fit
// are a prefix, so their count is the next bracket. Up to 32 requests in one step, 1024 in
// two. Every lane returns the same j.
struct WarpSearch {
  static constexpr int kScalarProbes = 4;
  template <class At>
  __device__ int last_at_most(int lo, int hi, int64_t x, const At& at) const {
    const int lane = int(threadIdx.x % 32);
    // Most runs are short where the batch is about one request a slot: a few compares first,
    // each cheaper than a ballot round (measured, H200: none -> two, uniform B128 Sq4 replans
    // 278 -> 231 us, lognormal B128 Sq4 250 -> 239; four, 232 and 232; eight, no better).
    // Their loads are issued together (indices clamped to hi, which is in bounds; a value
    // past hi is never compared), so the compares wait for one shared-memory round trip
    // instead of one each: replans 1-4 % faster on every traced batch (two alternated
    // runs, H200, bench/results/logs-v45/scalar-probes; two or eight such compares: mixed).
    int64_t next[kScalarProbes];
#pragma unroll
    for (int k = 0; k < kScalarProbes; ++k) next[k] = at(min(lo + 1 + k, hi));
#pragma unroll
    for (int k = 0; k < kScalarProbes; ++k) {
      if (lo == hi || next[k] > x) return lo;
      ++lo;
    }
    while (lo < hi) {
      const int step = (hi - lo + 31) / 32;
      const int idx = min(lo + (lane + 1) * step, hi);
      const int k = __popc(__ballot_sync(0xffffffffu, at(idx) <= x));
      const int next_hi = k < 32 ? min(lo + (k + 1) * step, hi) - 1 : hi;
      if (k > 0) lo = min(lo + k * step, hi);
      hi = next_hi;
    }
    return lo;
  }
};

// Where the walk's data live:
//  - in dynamic shared memory (at most kMaxPlannerSmem: 227 KiB less the static part, with
//    room) while they fit: each request's fill terms and the batch's prefix sums, 96 bytes
//    a request, then, for batches above kWalkWriteBatch, the probes' slot records
//    (StepRecords: kPlannerWarps + 2 records of G + 1 steps, 4.2 KiB each at G = 132). Up
//    to ~1,500 requests at G = 132;
//  - the arrays there and the records in the plan's global scratch
//    (device_planner_scratch_bytes) while the arrays alone fit (~2,300 requests): each
//    step's record is one 32-byte store, and the kept copy is read back once, after the
//    round's barrier (which makes the block's global writes visible to it);
//  - above, both in the scratch: the same walk, its loads from L1 / L2 instead of shared
//    memory (lognormal B3000 0.21 ms, B16384 0.30 ms, where fill() in every probe, O(batch)
//    steps each, took 1.6 and 24 ms).
// Small batches are written by the walk itself, which takes a long request's slots 32 at
// a time (B1 L131072: 3.9 us, against 13 from the records and 11 by fill()); above, the
// records write every request at once (B64 L32768: 4.7 us against 47, lognormal B512: 5.6
// against 65-155).
constexpr int kWalkWriteBatch = 8;
constexpr size_t kMaxPlannerSmem = 220 * 1024;
constexpr size_t kWalkBytesPerRequest = sizeof(RequestTerms) + 2 * sizeof(int64_t) + 4 * sizeof(int32_t);
__host__ __device__ constexpr size_t walk_smem_bytes(int batch) {
  return size_t(batch) * kWalkBytesPerRequest + 2 * sizeof(int64_t) + 3 * sizeof(int32_t) + 16;
}
__host__ __device__ constexpr size_t walk_records_offset(int batch) { return (walk_smem_bytes(batch) + 15) / 16 * 16; }
__host__ __device__ constexpr size_t walk_records_bytes(int num_clusters) {
  return size_t(kPlannerWarps + 2) * size_t(num_clusters + 1) * sizeof(plan_detail::CutStep);
}
__host__ __device__ constexpr bool records_kept(int batch) { return batch > kWalkWriteBatch; }
// Dynamic shared memory of a walk in the scratch: each warp's staging buffer (32 terms).
constexpr size_t kStagingBufferBytes = size_t(kPlannerWarps) * 32 * sizeof(RequestTerms);
static_assert(kStagingBufferBytes <= kMaxPlannerSmem, "the staging buffers fit the planner's shared memory");
enum class WalkPlace : int {
  kShared,         // arrays and records (if any) in shared memory
  kGlobalRecords,  // arrays in shared memory, records in the scratch
  kScratch,        // both in the scratch, records after the arrays
};
__host__ __device__ constexpr WalkPlace walk_place(int batch, int num_clusters) {
  const size_t arrays = walk_records_offset(batch);
  if (arrays + (records_kept(batch) ? walk_records_bytes(num_clusters) : 0) <= kMaxPlannerSmem) return WalkPlace::kShared;
  return arrays <= kMaxPlannerSmem ? WalkPlace::kGlobalRecords : WalkPlace::kScratch;
}

// The walk's arrays (prefix sums: batch + 1 entries), in shared memory or the scratch.
struct WalkArrays {
  RequestTerms* terms;
  int64_t* whole;
  int64_t* tile_cost;
  int32_t* tiles;
  int32_t* work;
  int32_t* zero;    // zero-fill entries before each request
  int32_t* splits;  // num_splits, kept for the split-request list
  __device__ WalkArrays(uint8_t* base, int batch) {
    const int n = batch + 1;
    terms = reinterpret_cast<RequestTerms*>(base);
    whole = reinterpret_cast<int64_t*>(terms + batch);
    tile_cost = whole + n;
    tiles = reinterpret_cast<int32_t*>(tile_cost + n);
    work = tiles + n;
    zero = work + n;
    splits = zero + n;
  }
};

using plan_detail::PrefixParts;

// A PrefixParts through one shuffle per field (shfl: a generic lambda on one value).
template <class Shfl>
__device__ PrefixParts shuffled(const PrefixParts& v, const Shfl& shfl) {
  PrefixParts x;
  x.whole = shfl(v.whole);
  x.tile_cost = shfl(v.tile_cost);
  x.tiles = shfl(v.tiles);
  x.work = shfl(v.work);
  x.zero = shfl(v.zero);
  return x;
}

// The staging and the prefix scan give each warp a run of whole 32-request chunks, a
// request per lane (consecutive requests in consecutive lanes: coalesced loads and stores
// whether the arrays are in shared or global memory). Before, each thread took a run of
// consecutive requests, so the lanes of a warp were 64 bytes x run apart: one shared-memory
// bank for all 32 at B2048, 32 cache lines per access in the scratch.
struct WarpChunks {
  int c0, c1;  // this warp's chunks: requests [32 c0, 32 c1)
  __device__ explicit WarpChunks(int batch) {
    const int chunks = (batch + 31) / 32, per_warp = (chunks + kPlannerWarps - 1) / kPlannerWarps;
    c0 = min(int(threadIdx.x / 32) * per_warp, chunks);
    c1 = min(c0 + per_warp, chunks);
  }
};

// One warp's chunk of terms (the first n lanes' t) to `to` (global, 16-byte aligned)
// through `buf` (shared, 2 KiB): each lane writes its terms in 16-byte quarters, the
// quarters of request r rotated by r (two lanes a bank group instead of four), then lane l
// copies quarters l, l + 32, ... of the chunk, so that each store instruction covers 512
// consecutive bytes. All 32 lanes call it.
__device__ void stage_terms_coalesced(const RequestTerms& t, int lane, int n, uint4* buf, uint4* to) {
  uint4 q[4];
  memcpy(q, &t, sizeof q);
#pragma unroll
  for (int k = 0; k < 4; ++k) buf[lane * 4 + ((k + lane) & 3)] = q[k];
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int piece = k * 32 + lane, r = piece / 4;
    if (piece < 4 * n) to[piece] = buf[r * 4 + ((piece % 4 + r) & 3)];
  }
  __syncwarp();
}

// A request's own parts, staged in the prefix arrays' slots (the scan overwrites them with
// the prefix sums).
__device__ void store_parts(const WalkArrays& a, int b, const PrefixParts& x) {
  a.whole[b] = x.whole;
  a.tile_cost[b] = x.tile_cost;
  a.tiles[b] = x.tiles;
  a.work[b] = x.work;
  a.zero[b] = x.zero;
}

// Exclusive prefix sums of the staged terms into the walk's arrays, after the staging's
// barrier: warp_sums holds each warp's total over its chunks; each warp scans its chunks by
// shuffles, carrying the sum of the warps before it. kPartsStaged: each request's parts are
// in the arrays' slots already (store_parts; coalesced loads of 28 bytes a request instead
// of its 64-byte terms, lanes 64 bytes apart: the scan of B16384 in the scratch took 37 us).
template <bool kPartsStaged>
__device__ void scan_prefixes(const WalkArrays& a, int batch, int num_tiles, const PrefixParts* warp_sums,
                              const WarpChunks& chunks) {
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  PrefixParts carry;
  for (int w = 0; w < warp; ++w) carry.add(warp_sums[w]);
  for (int c = chunks.c0; c < chunks.c1; ++c) {
    const int b = c * 32 + lane;
    PrefixParts mine{};
    if (b < batch) {
      if constexpr (kPartsStaged) {
        mine.whole = a.whole[b];
        mine.tile_cost = a.tile_cost[b];
        mine.tiles = a.tiles[b];
        mine.work = a.work[b];
        mine.zero = a.zero[b];
      } else {
        mine = PrefixParts::of(a.terms[b], num_tiles);
      }
    }
    PrefixParts incl = mine;
    for (int d = 1; d < 32; d *= 2) {
      const PrefixParts up = shuffled(incl, [d](auto v) { return __shfl_up_sync(0xffffffffu, v, d); });
      if (lane >= d) incl.add(up);
    }
    if (b < batch) {
      PrefixParts at = carry;
      at.add(incl);
      at.sub(mine);
      store_parts(a, b, at);
    }
    carry.add(shuffled(incl, [](auto v) { return __shfl_sync(0xffffffffu, v, 31); }));
  }
  if (threadIdx.x == 0) {
    PrefixParts total;
    for (int w = 0; w < kPlannerWarps; ++w) total.add(warp_sums[w]);
    store_parts(a, batch, total);
  }
  __syncthreads();
}

// The header and the split-request list (wide requests first, each group in request
// order), from num_splits (`splits`, written before the caller's last barrier). Every
// thread takes a run of consecutive requests and the block scans their counts (one warp's
// ballots over the batch took 15 us at B2048); thread 0 writes the header. `status` is the
// same in every thread, and every thread calls this.
__device__ void finish_plan(const PlanShape& shape, const PlanCounts& counts, int status, const int32_t* splits,
                            const DevicePlanBuffers& out) {
  __shared__ int warp_takes[kPlannerWarps][2];  // per warp: [0] narrow, [1] wide split requests
  const PlanBuffers& buffers = out.plan;
  DevicePlanHeader h{};
  h.status = status;
  h.bad_index = counts.bad_index;
  if (status != kPlanOk) {
    if (threadIdx.x != 0) return;
    const int G = shape.num_ctas / shape.cluster_size;
    for (int g = 0; g < G && g < buffers.work_list_capacity; ++g) buffers.work_list[g] = kNoWork;
    for (int b = 0; b < shape.batch; ++b) buffers.num_splits[b] = 0;
    *out.header = h;
    return;
  }
  const int B = shape.batch;
  const int per_thread = (B + kPlannerThreads - 1) / kPlannerThreads;
  const int b0 = min(int(threadIdx.x) * per_thread, B), b1 = min(b0 + per_thread, B);
  int mine[2] = {0, 0};
  for (int b = b0; b < b1; ++b) {
    const int ns = splits[b];
    if (ns > 1) ++mine[ns > kCombineNarrowSplits ? 1 : 0];
  }
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  int incl[2] = {mine[0], mine[1]};
  for (int d = 1; d < 32; d *= 2) {
    for (int f = 0; f < 2; ++f) {
      const int up = __shfl_up_sync(0xffffffffu, incl[f], d);
      if (lane >= d) incl[f] += up;
    }
  }
  if (lane == 31) {
    warp_takes[warp][0] = incl[0];
    warp_takes[warp][1] = incl[1];
  }
  __syncthreads();
  int before[2] = {incl[0] - mine[0], incl[1] - mine[1]}, total[2] = {0, 0};
  for (int w = 0; w < kPlannerWarps; ++w) {
    for (int f = 0; f < 2; ++f) {
      if (w < warp) before[f] += warp_takes[w][f];
      total[f] += warp_takes[w][f];
    }
  }
  int at[2] = {total[1] + before[0], before[1]};  // narrow ones after every wide one
  for (int b = b0; b < b1; ++b) {
    const int ns = splits[b];
    if (ns <= 1) continue;
    const int f = ns > kCombineNarrowSplits ? 1 : 0;
    if (at[f] < out.split_requests_capacity) out.split_requests[at[f]] = b;
    ++at[f];
  }
  if (threadIdx.x != 0) return;
  h.num_wide_requests = min(total[1], out.split_requests_capacity);
  h.num_split_requests = min(total[0] + total[1], out.split_requests_capacity);
  h.num_zero_fill = counts.num_zero_fill;
  h.num_slots = counts.num_slots;
  h.num_items = counts.num_items;
  *out.header = h;
  KBMLA_PLANNER_STAMP();
}

__device__ bool fits_capacities(const PlanCounts& c, const PlanBuffers& out) {
  return out.work_list_capacity >= c.work_list_len && out.bounds_capacity >= c.num_bounds &&
         out.zero_fill_capacity >= c.num_zero_fill;
}

// One probe's fill at `cap` with its counts (plan_search's fill_counts). Inlined: as a
// call it ran 10-20 % slower (measured, H200), its caller's live state saved around it.
struct WalkProbe {
  const PlanShape* shape;  // (the kernel's __grid_constant__ parameter)
  plan_detail::BatchPrefix pre;
  plan_detail::StagedRequests reqs;
  int num_tiles, num_clusters;
  bool all_visible;      // every request with work sees a key from its first q tile on
  bool walk_whole_form;  // the whole form walks (all_visible, and runs long enough)
  int work_total, zero_total;
  const StepRecords* records;  // null: nothing recorded
  __device__ bool fill(int64_t cap, bool whole, PlanCounts& local) const {
    const PlanShape& p = *shape;
    const int warp = int(threadIdx.x / 32);
    const bool lead = threadIdx.x % 32 == 0;
    const bool record = records != nullptr && (whole ? all_visible : p.fixed_split_blocks == 0);
    plan_detail::CutStep* record_at = record ? records->per_warp + warp * records->stride : nullptr;
    if (records != nullptr && !record && lead) records->num_steps[warp] = -1;
    if (whole ? !walk_whole_form : p.fixed_split_blocks > 0) {
      PlanCounts mine = local;  // (counted in registers, stored once)
      bool ok;
      if (record) {  // (whole form: each slot's first unit, the same from every lane)
        plan_detail::SlotStartSink sink(&mine, reinterpret_cast<int32_t*>(record_at), p.batch);
        ok = plan_detail::fill(p, reqs, num_tiles, num_clusters, cap, whole, sink);
        if (lead) records->num_steps[warp] = ok ? sink.num_slots_used : -1;
      } else {
        plan_detail::CountSink sink(&mine);
        ok = plan_detail::fill(p, reqs, num_tiles, num_clusters, cap, whole, sink);
      }
      local = mine;
      return ok;
    }
    plan_detail::WalkCounter counter{pre, local, p.batch};
    if (record && whole) counter.slot_starts = reinterpret_cast<int32_t*>(record_at);
    if (record && !whole && lead) {  // (lane 0 stores the steps)
      counter.steps = record_at;
      counter.max_steps = records->stride;
    }
    const bool ok = whole ? plan_detail::walk_whole(p, pre, num_tiles, num_clusters, cap, WarpSearch{}, counter)
                          : plan_detail::walk_cut(p, reqs, pre, num_clusters, cap, WarpSearch{}, counter);
    local = counter.counts;
    if (record && threadIdx.x % 32 == 0) records->num_steps[warp] = ok ? counter.num_steps : -1;
    if (whole) {
      local.num_pieces = work_total;
      local.num_bounds = 2 * work_total;
    }
    local.num_zero_fill = zero_total;
    return ok;
  }
};

// Every batch: the cap search's fills and the plan's writes are slot walks
// (fill() where the walk does not apply: batch-invariant cuts, the whole form with
// partly visible requests).
// One instantiation per place (walk_place), so that each keeps its shared loads and
// registers: with one pointer for shared and global records, ptxas spilled 192 bytes here
// instead of 68; with the arrays' place chosen at run time, the scan of B2048 took 13.8 us
// instead of 6.6, and arrays in the scratch make B1700-2048 replans 12 % slower.
template <WalkPlace kPlace>
__device__ __noinline__ void plan_by_walk(const PlanShape& shape, const int32_t* seqlens_global, const DevicePlanBuffers& out,
                             uint8_t* staged_bytes, const BlockProbes& block_probes) {
  __shared__ PrefixParts warp_sums[kPlannerWarps];
  __shared__ int64_t warp_max[kPlannerWarps];
  __shared__ int bad_index;
  __shared__ int num_steps[kPlannerWarps];
  __shared__ int64_t kept_cap[2];
  __shared__ int kept_steps[2];
  const int B = shape.batch;
  const int T = plan_detail::ceil_div(shape.heads * shape.q_len, shape.tile_rows);
  const int G = shape.num_ctas / shape.cluster_size;
  uint8_t* scratch = static_cast<uint8_t*>(out.scratch);
  uint8_t* arrays = kPlace == WalkPlace::kScratch ? scratch : staged_bytes;
  const WalkArrays a(arrays, B);
  auto* steps = reinterpret_cast<plan_detail::CutStep*>(kPlace == WalkPlace::kGlobalRecords ? scratch
                                                                                              : arrays + walk_records_offset(B));
  const StepRecords records{steps,     {steps + kPlannerWarps * (G + 1), steps + (kPlannerWarps + 1) * (G + 1)},
                            num_steps, kept_cap, kept_steps, G + 1};
  const bool recording = records_kept(B);
  BlockProbes probes = block_probes;
  probes.records = recording ? &records : nullptr;
  if (threadIdx.x == 0) {
    bad_index = INT_MAX;
    kept_cap[0] = kept_cap[1] = INT64_MAX;
    kept_steps[0] = kept_steps[1] = 0;
  }
  __syncthreads();
  bool partly_visible = false;
  int64_t max_tile_cost = 0;
  const WarpChunks chunks(B);
  PrefixParts warp_total;  // (the scan's first pass)
  for (int c = chunks.c0; c < chunks.c1; ++c) {
    if constexpr (kPlace == WalkPlace::kScratch) {
      const int lane = int(threadIdx.x % 32);
      const int b = c * 32 + lane;
      // In global memory a lane's own 64-byte store spans 16 cache lines a warp instruction
      // (most of this loop's time: B16384 staged in 116 us); through the warp's 2 KiB of
      // the otherwise unused dynamic shared memory each lane stores 16 consecutive bytes.
      // Every lane takes part in the copy (it stores pieces of other lanes' terms), also
      // those past the batch in the warp's last chunk.
      const int n = min(32, B - c * 32);
      RequestTerms t{};
      if (b < B) {
        const int32_t L = seqlens_global[b];
        if (L < 0) atomicMin(&bad_index, b);
        t = plan_detail::request_terms(shape, L, T, /*staged=*/true);
      }
      stage_terms_coalesced(t, lane, n, reinterpret_cast<uint4*>(staged_bytes) + (threadIdx.x / 32) * 128,
                            reinterpret_cast<uint4*>(a.terms + c * 32));
      if (b >= B) break;
      const PrefixParts parts = PrefixParts::of(t, T);
      store_parts(a, b, parts);
      warp_total.add(parts);
      const bool work = plan_detail::has_work(t.r);
      partly_visible |= work && t.r.first_tile > 0;
      if (work && t.tile_cost > max_tile_cost) max_tile_cost = t.tile_cost;
      continue;
    }
    const int b = c * 32 + int(threadIdx.x % 32);
    if (b >= B) break;
    const int32_t L = seqlens_global[b];
    if (L < 0) atomicMin(&bad_index, b);
    const RequestTerms t = plan_detail::request_terms(shape, L, T, /*staged=*/true);
    a.terms[b] = t;
    warp_total.add(PrefixParts::of(t, T));
    const bool work = plan_detail::has_work(t.r);
    partly_visible |= work && t.r.first_tile > 0;
    if (work && t.tile_cost > max_tile_cost) max_tile_cost = t.tile_cost;
  }
  for (int d = 16; d >= 1; d /= 2) {
    max_tile_cost = max(max_tile_cost, __shfl_xor_sync(0xffffffffu, max_tile_cost, d));
    warp_total.add(shuffled(warp_total, [d](auto v) { return __shfl_xor_sync(0xffffffffu, v, d); }));
  }
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = max_tile_cost;
    warp_sums[threadIdx.x / 32] = warp_total;
  }
  // The whole form's walk needs every request fully visible; it is also slower than fill()
  // where the slots' runs are short (one or two q tile units a slot: measured, uniform
  // B128 Sq4, 55-58 us a round against 20), so it walks only where runs average 4 units.
  const bool all_visible = !__syncthreads_or(partly_visible);
  const bool walk_whole_form = all_visible && T * B >= 4 * G;
  if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
  if (bad_index != INT_MAX) {
    PlanCounts failed;
    failed.status = kPlanNegativeSeqlen;
    failed.bad_index = bad_index;
    finish_plan(shape, failed, failed.status, nullptr, out);
    return;
  }
  scan_prefixes<kPlace == WalkPlace::kScratch>(a, B, T, warp_sums, chunks);
  if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
  const plan_detail::BatchPrefix pre{a.whole, a.tile_cost, a.tiles, a.work};
  const plan_detail::StagedRequests reqs{nullptr, a.terms};
  const WalkProbe probe{&shape, pre, reqs, T, G, all_visible, walk_whole_form, a.work[B], a.zero[B], probes.records};
  auto fill_counts = [&](int64_t cap, bool whole, PlanCounts& local) { return probe.fill(cap, whole, local); };
  max_tile_cost = 0;
  for (int w = 0; w < kPlannerWarps; ++w) max_tile_cost = max(max_tile_cost, warp_max[w]);
  const PlanCounts counts = plan_search(shape, a.whole[B], max_tile_cost, probes, fill_counts);
  int status = counts.status;
  if (status == kPlanOk && !fits_capacities(counts, out.plan)) status = kPlanCapacityTooSmall;
  if (status != kPlanOk) {
    finish_plan(shape, counts, status, nullptr, out);
    return;
  }
  PlanBuffers buffers = out.plan;
  __syncthreads();  // (thread 0 noted the kept records after the last round's barrier)
  if (recording && counts.whole_requests && all_visible && kept_cap[1] == counts.cap) {
    // Whole form: each request's table row and each q tile unit's entry at once.
    for (int i = threadIdx.x; i < counts.work_list_len; i += blockDim.x) buffers.work_list[i] = kNoWork;
    __syncthreads();
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
      plan_detail::zero_fill_request(shape, reqs, T, buffers, a.zero[b], b);
      plan_detail::whole_form_request(reqs, pre, buffers, a.splits, b);
    }
    const plan_detail::UnitPrefix units(pre, B);
    const auto* starts = reinterpret_cast<const int32_t*>(records.kept[1]);
    for (int k = threadIdx.x; k < T * B; k += blockDim.x) {
      plan_detail::write_unit_from_starts(shape, reqs, units, starts, kept_steps[1], counts.num_active_clusters,
                                          buffers, k);
    }
    __syncthreads();
    if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
    finish_plan(shape, counts, status, a.splits, out);
    return;
  }
  if (recording && !counts.whole_requests && shape.fixed_split_blocks == 0 && kept_cap[0] == counts.cap) {
    // Cut form: each request's writes from the kept steps, all requests at once.
    for (int i = threadIdx.x; i < counts.work_list_len; i += blockDim.x) buffers.work_list[i] = kNoWork;
    __syncthreads();
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
      plan_detail::zero_fill_request(shape, reqs, T, buffers, a.zero[b], b);
      plan_detail::write_request_from_steps(shape, reqs, pre, records.kept[0], kept_steps[0], G, counts.cap,
                                            counts.num_active_clusters, T, buffers, a.splits, b);
    }
    __syncthreads();
    if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
    finish_plan(shape, counts, status, a.splits, out);
    return;
  }
  // No record (batches of at most kWalkWriteBatch, or a plan whose form records nothing:
  // batch-invariant cuts, the whole form with partly visible requests): the walk
  // itself writes small batches, a long request's slots 32 at a time (B1 L131072: 3.8 us
  // against 11); elsewhere one warp's step per slot costs more than thread 0's fill() per
  // request (B64-B512: 63-107 us against 47-65), which writes the rest.
  const bool walked = B <= kWalkWriteBatch && (counts.whole_requests ? walk_whole_form : shape.fixed_split_blocks == 0);
  if (!walked) {
    if (threadIdx.x == 0) plan_write_requests(shape, reqs, counts, buffers);
    __syncthreads();
    finish_plan(shape, counts, status, buffers.num_splits, out);
    return;
  }
  // Every entry past a slot's items is negative: that fill first, then warp 0 walks and
  // writes the entries and the split table while the other warps write each request's
  // zero-fill entries (and, in the whole form, its split-table row).
  for (int i = threadIdx.x; i < counts.work_list_len; i += blockDim.x) buffers.work_list[i] = kNoWork;
  __syncthreads();
  if (threadIdx.x < 32) {
    plan_detail::WalkWriter<plan_detail::StagedRequests> writer{
        &shape, reqs, pre, counts.num_active_clusters, buffers, a.splits, int(threadIdx.x), 32, T};
    if (counts.whole_requests) {
      plan_detail::walk_whole(shape, pre, T, G, counts.cap, WarpSearch{}, writer);
    } else {
      plan_detail::walk_cut(shape, reqs, pre, G, counts.cap, WarpSearch{}, writer);
    }
  } else {
    for (int b = threadIdx.x - 32; b < B; b += blockDim.x - 32) {
      plan_detail::zero_fill_request(shape, reqs, T, buffers, a.zero[b], b);
      if (counts.whole_requests) plan_detail::whole_form_request(reqs, pre, buffers, a.splits, b);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
  finish_plan(shape, counts, status, a.splits, out);
}

// kCapProbes warps search the cap (one probe each per round, one more warp for an extra
// fill). On any failure the plan is left empty but well-formed: every slot's column starts
// with a negative entry. 17 warps: with 32 the fill had 64 registers and spilled once the
// whole-request form was added; 544 threads get 96, and ptxas spills some of the search's
// values (104 bytes in plan_by_walk<false>, 274 in plan_by_walk<true> at 1af96b7; their
// cost not measured alone).
__global__ void __launch_bounds__(kPlannerThreads, 1) device_planner_kernel(const __grid_constant__ PlanShape shape,
                                                        const int32_t* seqlens_global,
                                                        const __grid_constant__ DevicePlanBuffers out) {
  if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
  extern __shared__ uint4 staged_words[];  // (16-byte aligned)
  uint8_t* staged_bytes = reinterpret_cast<uint8_t*>(staged_words);
  __shared__ int verdict[kPlannerWarps];
  __shared__ PlanCounts counted[kPlannerWarps];
  __shared__ alignas(16) uint8_t scratch[BlockProbes::kScratchBytes];
  const BlockProbes probes{verdict, counted, scratch, nullptr};
  // (launch_device_planner checks that a shape with data in the scratch has it.)
  switch (walk_place(shape.batch, shape.num_ctas / shape.cluster_size)) {
    case WalkPlace::kShared:
      plan_by_walk<WalkPlace::kShared>(shape, seqlens_global, out, staged_bytes, probes);
      break;
    case WalkPlace::kGlobalRecords:
      plan_by_walk<WalkPlace::kGlobalRecords>(shape, seqlens_global, out, staged_bytes, probes);
      break;
    case WalkPlace::kScratch:
      plan_by_walk<WalkPlace::kScratch>(shape, seqlens_global, out, staged_bytes, probes);
      break;
  }
}

}  // namespace

size_t device_planner_scratch_bytes(const PlanShape& shape) {
  const int G = shape.num_ctas / shape.cluster_size;
  switch (walk_place(shape.batch, G)) {
    case WalkPlace::kShared:
      return 0;
    case WalkPlace::kGlobalRecords:
      return walk_records_bytes(G);
    case WalkPlace::kScratch:
      break;
  }
  return walk_records_offset(shape.batch) + walk_records_bytes(G);
}

void launch_device_planner(const PlanShape& shape, const int32_t* seqlens, const DevicePlanBuffers& out,
                           cudaStream_t stream) {
  require(shape.fixed_grid, "device planner: the shape must use the fixed-grid form");
  require(out.plan.cluster_cost == nullptr, "device planner: cluster_cost is not written on the device; pass null");
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      device_planner_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxPlannerSmem));
  require(attr_err == cudaSuccess, "device planner: cannot reserve ", kMaxPlannerSmem, " bytes of shared memory: ",
          cudaGetErrorString(attr_err));
  const size_t scratch_bytes = device_planner_scratch_bytes(shape);
  require(scratch_bytes == 0 || out.scratch != nullptr, "device planner: a batch of ", shape.batch,
          " needs its scratch (device_planner_scratch_bytes: ", scratch_bytes, " bytes); out.scratch is null");
  const int G = shape.num_ctas / shape.cluster_size;
  const WalkPlace place = walk_place(shape.batch, G);
  const size_t smem = place == WalkPlace::kScratch         ? kStagingBufferBytes
                      : place == WalkPlace::kGlobalRecords ? walk_records_offset(shape.batch)
                                                           : walk_records_offset(shape.batch) +
                                                                 (records_kept(shape.batch) ? walk_records_bytes(G) : 0);
  device_planner_kernel<<<1, kPlannerThreads, smem, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
