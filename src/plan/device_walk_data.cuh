// The device planner's data: where the slot walk's arrays and step records live (shared
// memory or the plan's global scratch, walk_place), their staging and prefix scan by warp
// chunks, and the plan's header with the combine's split-request list. Included by
// device_planner.cu only (an unnamed namespace, as device_probes.cuh).
#pragma once

#include "src/plan/device_planner.hpp"
#include "src/plan/device_probes.cuh"

namespace kbmla {
namespace {

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
// A walk's bytes in each place, by walk_place: the launch's dynamic shared memory and the
// plan's global scratch (device_planner_scratch_bytes).
struct WalkBytes {
  size_t smem, scratch;
};
__host__ __device__ constexpr WalkBytes walk_bytes(int batch, int num_clusters) {
  const size_t arrays = walk_records_offset(batch), records = walk_records_bytes(num_clusters);
  switch (walk_place(batch, num_clusters)) {
    case WalkPlace::kShared:
      return {arrays + (records_kept(batch) ? records : 0), 0};
    case WalkPlace::kGlobalRecords:
      return {arrays, records};
    case WalkPlace::kScratch:
      break;
  }
  return {kStagingBufferBytes, arrays + records};
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
// the prefix sums), and read back.
__device__ void store_parts(const WalkArrays& a, int b, const PrefixParts& x) {
  a.whole[b] = x.whole;
  a.tile_cost[b] = x.tile_cost;
  a.tiles[b] = x.tiles;
  a.work[b] = x.work;
  a.zero[b] = x.zero;
}
__device__ PrefixParts load_parts(const WalkArrays& a, int b) {
  PrefixParts x;
  x.whole = a.whole[b];
  x.tile_cost = a.tile_cost[b];
  x.tiles = a.tiles[b];
  x.work = a.work[b];
  x.zero = a.zero[b];
  return x;
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
      mine = kPartsStaged ? load_parts(a, b) : PrefixParts::of(a.terms[b], num_tiles);
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

// A failed plan: empty (every slot's column starts with a negative entry, no request has
// splits) and its header, by every thread (the callers reach it block-uniformly; the
// batch's num_splits was thread 0's loop before, O(batch)). Not inlined: inlined at
// finish_plan's sites it added 16-42 bytes of spills to plan_by_walk (v47).
__device__ __noinline__ void write_failed_plan(const PlanShape& shape, const DevicePlanHeader& h,
                                               const DevicePlanBuffers& out) {
  const PlanBuffers& buffers = out.plan;
  const int G = shape.num_ctas / shape.cluster_size;
  for (int g = threadIdx.x; g < G && g < buffers.work_list_capacity; g += blockDim.x) buffers.work_list[g] = kNoWork;
  for (int b = threadIdx.x; b < shape.batch; b += blockDim.x) buffers.num_splits[b] = 0;
  if (threadIdx.x == 0) *out.header = h;
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
    write_failed_plan(shape, h, out);
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

}  // namespace
}  // namespace kbmla
