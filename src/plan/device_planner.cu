#include "src/plan/device_planner.hpp"

#include <climits>

#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/plan/device_probes.cuh"
#include "src/plan/device_walk_data.cuh"
#include "src/plan/slot_walk.hpp"

namespace kbmla {

namespace {

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
// values (68 / 88 / 156 bytes in plan_by_walk<kShared / kGlobalRecords / kScratch> at
// 7af5c32; their cost not measured alone).
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
  return walk_bytes(shape.batch, shape.num_ctas / shape.cluster_size).scratch;
}

void launch_device_planner(const PlanShape& shape, const int32_t* seqlens, const DevicePlanBuffers& out,
                           cudaStream_t stream) {
  require(shape.fixed_grid, "device planner: the shape must use the fixed-grid form");
  require(out.plan.cluster_cost == nullptr, "device planner: cluster_cost is not written on the device; pass null");
  const cudaError_t attr_err = reserve_dynamic_smem<device_planner_kernel>(int(kMaxPlannerSmem));
  require(attr_err == cudaSuccess, "device planner: cannot reserve ", kMaxPlannerSmem, " bytes of shared memory: ",
          cudaGetErrorString(attr_err));
  const WalkBytes bytes = walk_bytes(shape.batch, shape.num_ctas / shape.cluster_size);
  require(bytes.scratch == 0 || out.scratch != nullptr, "device planner: a batch of ", shape.batch,
          " needs its scratch (device_planner_scratch_bytes: ", bytes.scratch, " bytes); out.scratch is null");
  device_planner_kernel<<<1, kPlannerThreads, bytes.smem, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
