#include "src/combine/combine.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"

namespace kbmla {

namespace {

constexpr int kDv = 512;
constexpr int kQuarterCols = 128;   // columns of one block: 32 lanes x float4
constexpr int kQuarters = kDv / kQuarterCols;
// Warps per block (kWarps, a template argument below): a wide task's warps stride over its
// splits; narrow tasks take one warp each. 16 (512 threads, two blocks per SM) when a wide
// request has more splits than one round of 8 warps' prefetch holds (a 132-split request
// then loads in one round instead of three), else 8 (requests of 17..72 splits lost with
// 16 warps: half the blocks per SM and a 16-warp reduction for 2 to 3 loads per warp).
constexpr int64_t kDevicePlanCombineWarps = 8448;  // 64 per SM of an H100/H200

// Writes columns [quarter * 128, +128) of an empty row (O = 0), and its LSE = -inf from
// quarter 0.
__device__ __forceinline__ void write_empty_quarter(const CombineParams& p, int b, int row, int quarter, int lane) {
  const OutputView& v = p.output;
  __nv_bfloat16* out =
      static_cast<__nv_bfloat16*>(v.out) + row_offset(v.out_strides, b, row, v.heads) + quarter * kQuarterCols;
  *reinterpret_cast<uint2*>(out + lane * 4) = make_uint2(0, 0);
  if (quarter == 0 && lane == 0) v.lse[row_offset(v.lse_strides, b, row, v.heads)] = -__int_as_float(0x7f800000);
}

template <int kWarps>
__device__ __forceinline__ float block_reduce(float v, float* scratch, bool is_max) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffff, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kWarps; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  __syncthreads();
  return v;
}

__device__ __forceinline__ void store_quarter(const CombineParams& p, int b, int row, int quarter, int lane, float4 acc) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x, acc.y), hi = __floats2bfloat162_rn(acc.z, acc.w);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t*>(&lo);
  packed.y = *reinterpret_cast<uint32_t*>(&hi);
  const OutputView& v = p.output;
  __nv_bfloat16* out =
      static_cast<__nv_bfloat16*>(v.out) + row_offset(v.out_strides, b, row, v.heads) + quarter * kQuarterCols;
  *reinterpret_cast<uint2*>(out + lane * 4) = packed;
}

__device__ __forceinline__ void fma4(float4& acc, float w, const float4& v) {
  acc.x += w * v.x;
  acc.y += w * v.y;
  acc.z += w * v.z;
  acc.w += w * v.w;
}

// Four bf16 (one 8-byte word, the lowest address in the low half) as fp32: a bf16 is the
// high half of an fp32, so a shift or a mask, no conversion.
__device__ __forceinline__ float4 widen_bf16x4(uint2 u) {
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

// A lane's four partial O values (columns 4 l..) of one split, from fp32 or bf16 partials,
// widened as they are loaded (the general kernels' wide merges; the narrow merges and the
// dense kernels keep bf16 words until the multiply: NarrowLoads). Twice the splits in
// flight per lane in the same registers made the merges slower, and so did the wide merges
// on bf16 words at 64 registers where the general kernel's grid is one wave (bench/NOTES.md v36).
// The partials are read through L2 only (ld.global.cg), not the read-only path: with early
// merges the decode still writes other slots while this grid runs, so no line of them may
// be cached from before its flag.
__device__ __forceinline__ float4 load4(const float* at) { return __ldcg(reinterpret_cast<const float4*>(at)); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* at) {
  return widen_bf16x4(__ldcg(reinterpret_cast<const uint2*>(at)));
}

// Partial O loads widened to float4 as they are loaded.
template <class Partial>
struct WidenedLoads {
  using Raw = float4;
  __device__ __forceinline__ static Raw load(const Partial* at) { return load4(at); }
  __device__ __forceinline__ static float4 values(const Raw& r) { return r; }
};

// A narrow merge's loads as they arrive: fp32 partials as float4; bf16 ones as 8-byte words,
// widened at the multiply (16 registers for a batch instead of 32: the narrow-only kernel
// fits 64 registers, four blocks per SM).
template <class Partial>
struct NarrowLoads : WidenedLoads<Partial> {};
template <>
struct NarrowLoads<__nv_bfloat16> {
  using Raw = uint2;
  __device__ __forceinline__ static Raw load(const __nv_bfloat16* at) {
    return __ldcg(reinterpret_cast<const uint2*>(at));
  }
  __device__ __forceinline__ static float4 values(const Raw& u) { return widen_bf16x4(u); }
};

// The splits s = first + j * step (< ns) of one 128-column quarter that a warp merges.
// Their partial O loads are issued before the LSE weights are known (the loads only need
// the slot), so the LSE read and its reductions overlap the O round trip instead of
// preceding it; later splits go out kLoadBatch at a time. Loads never wait on a weight
// test (a load behind one left one load in flight per warp: ~12 us for a 132-split
// request). A split of weight 0 (LSE -inf) is skipped after its load, never multiplied:
// its partial O may be 0/0. The prefetch depth is bounded by occupancy: 16 float4 per
// lane took 159 registers (one block per SM); 9 fit 64 (two blocks of 512 threads) or 78
// (three of 256).
constexpr int kPrefetch = 9;
constexpr int kLoadBatch = 8;
// kRaw: bf16 partials kept as 8-byte words until the multiply (NarrowLoads; the dense
// kernels), else widened as loaded.
template <class Partial, bool kRaw = false>
struct SplitWalk {
  using L = std::conditional_t<kRaw, NarrowLoads<Partial>, WidenedLoads<Partial>>;
  const Partial* base;
  int64_t stride;
  int first, step, ns;
  typename L::Raw v[kPrefetch];

  __device__ __forceinline__ void prefetch() {
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j) v[j] = load(first + j * step);
  }
  __device__ __forceinline__ typename L::Raw load(int s) const {
    return s < ns ? L::load(base + s * stride) : typename L::Raw{};
  }
  // The weighted sums of the walk's splits, in walk order: the j-th split goes to
  // acc[j % kAccs] (kAccs > 1: the virtual warps of combine_wide's invariant order).
  template <int kAccs, class Weight>
  __device__ __forceinline__ void weighted_sums(Weight&& weight, float4 (&acc)[kAccs]) const {
    static_assert(kLoadBatch % kAccs == 0, "a batch starts at the same accumulator");
#pragma unroll
    for (int i = 0; i < kAccs; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j) {
      const int s = first + j * step;
      const float w = s < ns ? weight(s) : 0.f;
      if (w != 0.f) fma4(acc[j % kAccs], w, L::values(v[j]));
    }
    for (int s0 = first + kPrefetch * step; s0 < ns; s0 += kLoadBatch * step) {
      typename L::Raw u[kLoadBatch];
#pragma unroll
      for (int j = 0; j < kLoadBatch; ++j) u[j] = load(s0 + j * step);
#pragma unroll
      for (int j = 0; j < kLoadBatch; ++j) {
        const int s = s0 + j * step;
        const float w = s < ns ? weight(s) : 0.f;
        if (w != 0.f) fma4(acc[(kPrefetch + j) % kAccs], w, L::values(u[j]));
      }
    }
  }
};

// What a merge task needs of the plan: the request, its split count and first partial
// slot. Plan data only (none of the decode's outputs), so a block loads its first task's
// before waiting for the decode: after the wait only the partials' round trip is left
// (it was four dependent round trips: ~4.3 us of B1's combine, bench --balance, v27).
struct SplitRequest {
  int b, ns;
  int64_t slot0;
};
__device__ __forceinline__ SplitRequest split_request(const CombineParams& p, int index) {
  const int b = p.split_requests[index];
  return {b, p.splits.num_splits[b], int64_t{p.splits.first_slot[b]}};
}

// A narrow request (<= kCombineNarrowSplits splits): one warp merges one row, all four
// column quarters (lane l: columns 128 q + 4 l); the lanes hold one split's LSE each, so
// the weights need warp shuffles only. Its partial O loads go out kNarrowBatch splits x 4
// quarters at a time (4 KB per warp in flight with fp32 partials, 2 with bf16), the first
// batch with the LSE load. A warp per (row, quarter) held a quarter of that: the 64-row
// split cases' merges were bound by bytes in flight (lognormal_H16_Sq4: 190 partial slots
// x 64 rows x 2 KB = 25 MB in ~17 us, bench --balance, v27).
// A row that sees no key in any split has only -inf partial LSEs (the decode writes them),
// so it needs no test of its own: it is written empty below.
constexpr int kNarrowBatch = 2;
template <class Partial>
__device__ __forceinline__ void combine_narrow(const CombineParams& p, const SplitRequest& r, int task, int lane) {
  using NL = NarrowLoads<Partial>;
  const int row = task % p.rows;
  const int b = r.b, ns = r.ns;
  const int64_t slot0 = r.slot0;
  const Partial* base = static_cast<const Partial*>(p.partial_o) + (slot0 * p.rows + row) * kDv + lane * 4;
  const int64_t stride = int64_t{p.rows} * kDv;
  auto load_batch = [&](int s0, typename NL::Raw (&v)[kNarrowBatch][kQuarters]) {
#pragma unroll
    for (int j = 0; j < kNarrowBatch; ++j) {
#pragma unroll
      for (int q = 0; q < kQuarters; ++q) {
        v[j][q] = s0 + j < ns ? NL::load(base + (s0 + j) * stride + q * kQuarterCols) : typename NL::Raw{};
      }
    }
  };
  typename NL::Raw v[kNarrowBatch][kQuarters];
  load_batch(0, v);
  const float neg_inf = -__int_as_float(0x7f800000);
  const float lse_s = lane < ns ? __ldcg(p.partial_lse + (slot0 + lane) * p.rows + row) : neg_inf;
  float max_lse = lse_s;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffff, max_lse, off));
  if (max_lse == neg_inf) {
#pragma unroll
    for (int q = 0; q < kQuarters; ++q) write_empty_quarter(p, b, row, q, lane);
    return;
  }
  const float e = lse_s == neg_inf ? 0.f : exp2f(lse_s - max_lse);
  float sum = e;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
  const float w_lane = e / sum;
  float4 acc[kQuarters];
#pragma unroll
  for (int q = 0; q < kQuarters; ++q) acc[q] = make_float4(0.f, 0.f, 0.f, 0.f);
  // ns is warp-uniform, so every lane takes part in each shuffle. -inf partials weigh
  // exactly 0 and are skipped: their O may be 0/0.
  for (int s0 = 0;;) {
#pragma unroll
    for (int j = 0; j < kNarrowBatch; ++j) {
      const float w = __shfl_sync(0xffffffff, w_lane, (s0 + j) & 31);
      if (s0 + j < ns && w != 0.f) {
#pragma unroll
        for (int q = 0; q < kQuarters; ++q) fma4(acc[q], w, NL::values(v[j][q]));
      }
    }
    s0 += kNarrowBatch;
    if (s0 >= ns) break;
    load_batch(s0, v);
  }
#pragma unroll
  for (int q = 0; q < kQuarters; ++q) store_quarter(p, b, row, q, lane, acc[q]);
  if (lane == 0) {
    p.output.lse[row_offset(p.output.lse_strides, b, row, p.output.heads)] = (max_lse + log2f(sum)) * p.output.lse_scale;
  }
}

template <int kWarps, int kSums = kWarps>
struct CombineShared {
  float weights[kMaxSplitsPerRequest];
  float scratch[kWarps];
  float4 partial_sums[kSums][32];
};

// Batch-invariant plans (CombineParams::invariant_order) need a wide request's bits to
// follow its own splits, not the block size its batch chose (4, 8 or 16 warps). So they sum
// as 16 virtual warps whatever kWarps is: virtual warp v adds splits v, v + 16, ... in order,
// and warp 0 adds the 16 sums in order, as a 16-warp block's warps do. Warp w of kWarps holds
// virtual warps w, w + kWarps, ... (its walk's j-th split is virtual warp w + kWarps (j %
// (16 / kWarps))). The LSE reductions are already the same: the warp's shuffle tree over 32
// consecutive splits, then the warps in order, the extra warps adding zeros.
constexpr int kInvariantVirtualWarps = 16;

// A wide request's (row, column quarter): the kWarps warps take every kWarps-th split, so
// up to kWarps x kPrefetch float4 loads per lane are in flight even for one long request;
// a shared-memory reduction adds the warps' sums. Block-uniform control flow (barriers).
template <int kWarps, class Partial, bool kRaw, bool kInvariant, int kSums>
__device__ __forceinline__ void combine_wide(const CombineParams& p, CombineShared<kWarps, kSums>& sh,
                                             const SplitRequest& r, int task) {
  constexpr int kAccs = kInvariant ? kInvariantVirtualWarps / kWarps : 1;
  static_assert(kSums == kWarps * kAccs, "a partial sum per (virtual) warp");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int quarter = task % kQuarters;
  const int row = (task / kQuarters) % p.rows;
  const int b = r.b, ns = r.ns;
  const int64_t slot0 = r.slot0;
  SplitWalk<Partial, kRaw> walk{
      static_cast<const Partial*>(p.partial_o) + (slot0 * p.rows + row) * kDv + quarter * kQuarterCols + lane * 4,
      int64_t{p.rows} * kDv, warp, kWarps, ns};
  walk.prefetch();
  const float neg_inf = -__int_as_float(0x7f800000);
  float lse_s = neg_inf;
  if (int(threadIdx.x) < ns) lse_s = __ldcg(p.partial_lse + (slot0 + threadIdx.x) * p.rows + row);
  const float max_lse = block_reduce<kWarps>(lse_s, sh.scratch, true);
  if (max_lse == neg_inf) {  // every split saw only masked keys
    if (warp == 0) write_empty_quarter(p, b, row, quarter, lane);
    return;
  }
  const float e = lse_s == neg_inf ? 0.f : exp2f(lse_s - max_lse);
  const float sum = block_reduce<kWarps>(e, sh.scratch, false);
  // -inf partials weigh exactly 0 and are skipped: their O may be 0/0.
  if (int(threadIdx.x) < ns) sh.weights[threadIdx.x] = e / sum;
  __syncthreads();
  float4 accs[kAccs];
  walk.weighted_sums([&](int s) { return sh.weights[s]; }, accs);
#pragma unroll
  for (int i = 0; i < kAccs; ++i) sh.partial_sums[warp + kWarps * i][lane] = accs[i];
  __syncthreads();
  if (warp != 0) return;
  float4 acc = accs[0];
  for (int w = 1; w < kSums; ++w) fma4(acc, 1.f, sh.partial_sums[w][lane]);
  store_quarter(p, b, row, quarter, lane, acc);
  if (quarter == 0 && lane == 0) p.output.lse[row_offset(p.output.lse_strides, b, row, p.output.heads)] = (max_lse + log2f(sum)) * p.output.lse_scale;
}

// Early merges (combine.hpp; work_format.hpp, CombineSync). A block's waits for the pieces
// of its tasks' requests: lane / thread s polls split s's flag for the task row's 64-row
// group (acquire: the partials' reads come after it), backing off between polls. A flag
// missing past the deadline (a decode running longer than that, or a piece that was never
// flagged) makes the block wait for the whole decode grid instead, as without early
// merges, and count a fallback: a missing flag costs time, never a wrong merge.
constexpr unsigned long long kFlagWaitNs = 4'000'000;
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct EarlyWait {
  const unsigned long long* flags;  // null: no early merges
  int groups;                        // flags per slot
  int rows_per_flag;                 // the decode CTAs' row slices (CombineParams::piece_rows)
  unsigned long long flag;           // this call's piece flag
  unsigned long long deadline;       // %globaltimer
  bool decode_done;                  // waited for the decode grid: every partial is there

  // Relaxed polls, each a round trip to L2, back to back for the first 64 (tens of us:
  // the merges at the decode's end see their flags within one), then 256 ns apart; the
  // acquire fence once the flag is there.
  __device__ __forceinline__ bool piece_ready(int64_t slot, int row) const {
    const unsigned long long* at = flags + slot * groups + piece_of_row(row, rows_per_flag);
    for (int polls = 0;; ++polls) {
      unsigned long long v;
      asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(at) : "memory");
      if (v == flag) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        return true;
      }
      if (global_ns() > deadline) return false;
      if (polls >= 64) __nanosleep(256);
    }
  }
  __device__ __forceinline__ void give_up(const CombineParams& p, bool counter) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (counter) atomicAdd(&p.sync->fallbacks, 1u);
    decode_done = true;
  }
  // Block-uniform (wide tasks: thread s < ns polls split s).
  __device__ __forceinline__ void for_block(const CombineParams& p, const SplitRequest& r, int row) {
    if (decode_done) return;
    const bool ok = int(threadIdx.x) >= r.ns || piece_ready(r.slot0 + threadIdx.x, row);
    if (!__syncthreads_and(ok)) give_up(p, threadIdx.x == 0);
  }
  // Warp-uniform (a narrow task: lane s < ns polls split s).
  __device__ __forceinline__ void for_warp(const CombineParams& p, const SplitRequest& r, int row, int lane) {
    if (decode_done) return;
    const bool ok = lane >= r.ns || piece_ready(r.slot0 + lane, row);
    if (!__all_sync(0xffffffffu, ok)) give_up(p, lane == 0);
    __syncwarp();  // orders the other lanes' partial reads after each lane's acquire
  }
};

// Work of the combine, as blocks: [0, W) wide (request, row, quarter) tasks, [W, W + N)
// kWarps narrow tasks (rows) each, [W + N, W + N + Z) one zero-filled q tile each. The counts are
// the host plan's, or, for device-made plans, read from the plan header; the grid strides
// over the blocks, so a device plan's grid need not match its (data-dependent) counts.
// The kernel's forms: kGeneral, two blocks of 512 threads per SM (64 registers), three of 256
// or six of 128 (80 registers); for bf16 partials only (their 8-byte loads fit 64 registers):
// kNarrowOnly (host plans without wide requests: no wide path, four 8-warp blocks per SM)
// and kDense (the wide path on 8-byte loads, four 8-warp or eight 4-warp blocks per SM).
enum CombineForm { kGeneral, kNarrowOnly, kDense };
__host__ __device__ constexpr int combine_blocks_per_sm(int warps, int form) {
  return form != kGeneral ? 65536 / (64 * warps * 32) : (warps == 16 ? 2 : (warps == 8 ? 3 : 6));
}
template <int kWarps, class Partial, int kForm = kGeneral, bool kInvariant = false>
__global__ void __launch_bounds__(kWarps * 32, combine_blocks_per_sm(kWarps, kForm))
    combine_kernel(const __grid_constant__ CombineParams p) {
  constexpr int kSums = kInvariant ? kInvariantVirtualWarps : kWarps;
  __shared__ CombineShared<kWarps, kSums> sh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The counts and the plan are written before the decode runs (the host, or the device
  // planner ahead of it in the stream): read before the wait.
  const int num_split = p.header ? p.header->num_split_requests : p.num_split_requests;
  const int num_wide = p.header ? p.header->num_wide_requests : p.num_wide_requests;
  const int num_zero = p.header ? p.header->num_zero_fill : p.num_zero_fill;
  const int wide_blocks = num_wide * p.rows * kQuarters;
  const int narrow_tasks = (num_split - num_wide) * p.rows;  // a warp per row
  const int narrow_end = wide_blocks + (narrow_tasks + kWarps - 1) / kWarps;
  const int total = narrow_end + num_zero;
  // The request of this block's (or warp's) task in the task set `blk` falls in.
  auto request_of = [&](int blk) {
    if (blk < wide_blocks) return split_request(p, blk / (kQuarters * p.rows));
    const int task = (blk - wide_blocks) * kWarps + warp;
    if (blk < narrow_end && task < narrow_tasks) return split_request(p, num_wide + task / p.rows);
    return SplitRequest{0, 0, 0};
  };
  SplitRequest first = blockIdx.x < unsigned(total) ? request_of(int(blockIdx.x)) : SplitRequest{0, 0, 0};
  // Launched as a programmatic dependent of the decode (which lets it launch from its
  // prologue): without early merges, wait for the decode grid (and its memory writes) here.
  // With them, each task waits for its request's piece flags; the call's epoch is read
  // before this block arrives below, and the last block to arrive (every block then past
  // its last wait, so every flag of the call seen) advances it for the next call.
  bool early = p.piece_flags != nullptr;
  unsigned long long epoch = 0;
  if (early) {
    unsigned long long ready;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(epoch) : "l"(&p.sync->epoch) : "memory");
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(ready) : "l"(&p.sync->ready) : "memory");
    early = ready == kCombineSyncReady;  // the same for every block: a header init_workspace made
  }
  EarlyWait wait{p.piece_flags, p.piece_row_groups, p.piece_rows, piece_flag(epoch), global_ns() + kFlagWaitNs,
                 !early};
  if (!early) asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned arrivals_before = 0;  // thread 0's arrival: the blocks that arrived before it
  auto arrive = [&] {            // block-uniform, once
    __syncthreads();
    if (threadIdx.x == 0) arrivals_before = atomicAdd(&p.sync->arrivals, 1u);
  };
  if (early && int(blockIdx.x) >= narrow_end) arrive();  // no merge task
  unsigned long long started = 0;
  if (p.timeline != nullptr && threadIdx.x == 0 && !early) started = global_ns();
  for (int blk = blockIdx.x; blk < total; blk += gridDim.x) {
    const SplitRequest r = blk == int(blockIdx.x) ? first : request_of(blk);
    const bool last_merge = blk < narrow_end && blk + int(gridDim.x) >= narrow_end;
    if constexpr (kForm != kNarrowOnly) {
      if (blk < wide_blocks) {
        wait.for_block(p, r, (blk / kQuarters) % p.rows);
        if (early && last_merge) arrive();
        if (p.timeline != nullptr && threadIdx.x == 0 && started == 0) started = global_ns();
        combine_wide<kWarps, Partial, kForm == kDense, kInvariant>(p, sh, r, blk);
        __syncthreads();  // the shared buffers are reused by the next wide task
        continue;
      }
    }
    if (blk < narrow_end) {
      const int task = (blk - wide_blocks) * kWarps + warp;
      if (task < narrow_tasks) wait.for_warp(p, r, task % p.rows, lane);
      if (early && last_merge) arrive();
      if (p.timeline != nullptr && threadIdx.x == 0 && started == 0) started = global_ns();
      if (task < narrow_tasks) combine_narrow<Partial>(p, r, task, lane);
    } else {
      const int entry = p.zero_fill[blk - narrow_end];
      const int tile_batch = work_entry_tile_batch(entry);
      const int t = tile_batch / p.batch, b = tile_batch % p.batch;
      const int end = min(p.rows, (t + 1) * p.tile_rows);
      for (int i = t * p.tile_rows * kQuarters + warp; i < end * kQuarters; i += kWarps) {
        write_empty_quarter(p, b, i / kQuarters, i % kQuarters, lane);
      }
    }
  }
  if (early) {
    if (threadIdx.x == 0 && arrivals_before == gridDim.x - 1) {
      p.sync->arrivals = 0;
      p.sync->epoch = epoch + 1;
    }
  }
  if (p.timeline != nullptr) {  // block-uniform
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned long long ended = global_ns();
      p.timeline[2 * blockIdx.x] = started != 0 ? started : ended;
      p.timeline[2 * blockIdx.x + 1] = ended;
    }
  }
  // Early merges end before the decode may: this grid must not complete before it (the
  // stream's next kernel reads the decode's final outputs).
  if (early) asm volatile("griddepcontrol.wait;" ::: "memory");
}

template <int kWarps>
int64_t blocks_with(const CombineParams& p) {
  const int64_t wide_blocks = int64_t{p.num_wide_requests} * p.rows * kQuarters;
  const int64_t narrow_tasks = int64_t{p.num_split_requests - p.num_wide_requests} * p.rows;
  int64_t blocks = wide_blocks + (narrow_tasks + kWarps - 1) / kWarps + p.num_zero_fill;
  // Device-made plans pass capacities: launch a bounded grid that strides over the actual
  // work instead of one block per possible task (most would exit at once).
  if (p.header != nullptr && blocks > 0) blocks = std::min<int64_t>(blocks, kDevicePlanCombineWarps / kWarps);
  return blocks;
}

// Dynamic shared memory (unused) that a block asks for when the grid has no more blocks
// than the device has SMs: over half of an SM's 228 KiB, so no two blocks share one. The
// blocks start on the SMs the decode frees first, and without it they packed there two or
// three to an SM (occupancy allows that) while other SMs idled: B1's 64 wide blocks merged
// on ~32 SMs. Measured (v28, H200, three alternated runs): bf16 B1 54.6-55.2 -> 53.2 us,
// fp8 B1 ~-1 us, skew_Sq1 level; grids larger than the SM count (B4_Sq4's 1024 blocks,
// the 96-head Kimi merge) lost 3-18 us this way, so they keep the packing.
constexpr int kSpreadSmemBytes = 120 * 1024;

// The opt-in to that much dynamic shared memory, once per kernel and device (a function
// attribute belongs to the device's context: engines drive one GPU per thread).
template <int kWarps, class Partial, int kForm, bool kInvariant>
void reserve_spread_smem() {
  const cudaError_t err = reserve_dynamic_smem<combine_kernel<kWarps, Partial, kForm, kInvariant>>(kSpreadSmemBytes);
  if (err != cudaSuccess) {
    int device = -1;
    cudaGetDevice(&device);
    require(false, "combine: cannot reserve ", kSpreadSmemBytes, " bytes of shared memory per block on device ",
            device, ": ", cudaGetErrorString(err));
  }
}

// A grid of `blocks` blocks gets an SM per block (see kSpreadSmemBytes).
bool spreads(int64_t blocks, int sm_count) { return blocks > 0 && blocks <= sm_count; }

template <int kWarps, class Partial, int kForm, bool kInvariant = false>
void launch_combine_with(const CombineParams& p, cudaStream_t stream) {
  const int64_t blocks = blocks_with<kWarps>(p);
  if (blocks == 0) return;
  require(blocks < (int64_t{1} << 31), "combine: ", blocks, " blocks exceed the grid limit");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(unsigned(kWarps * 32));
  config.stream = stream;
  if (spreads(blocks, p.sm_count)) {
    reserve_spread_smem<kWarps, Partial, kForm, kInvariant>();
    config.dynamicSmemBytes = kSpreadSmemBytes;
  }
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, combine_kernel<kWarps, Partial, kForm, kInvariant>, p);
  require(err == cudaSuccess, "combine: launch failed: ", cudaGetErrorString(err));
}

}  // namespace

// 16 warps only when a wide request's splits exceed one round of 8 warps' prefetch;
// 4 when every wide request fits one round of 4 warps' prefetch (17..36 splits: twice the
// blocks per SM, each warp twice the loads in flight of 8 warps). Calls f with the count
// as a std::integral_constant.
template <class F>
static decltype(auto) with_combine_warps(const CombineParams& p, F&& f) {
  if (p.max_wide_splits > 8 * kPrefetch) return f(std::integral_constant<int, 16>{});
  if (p.max_wide_splits > 0 && p.max_wide_splits <= 4 * kPrefetch) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

int64_t combine_blocks(const CombineParams& p) {
  return with_combine_warps(p, [&](auto warps) { return blocks_with<warps()>(p); });
}

bool combine_spreads_blocks(const CombineParams& p) { return spreads(combine_blocks(p), p.sm_count); }

CombineKernelChoice combine_kernel_choice(const CombineParams& p) {
  // Host plans of bf16 partials without a wide request: the narrow-only kernel, four blocks
  // of 8 warps per SM (64 registers) instead of three, so lognormal_H16_Sq4's 472 blocks
  // run in one wave instead of 1.19 (ncu). Three alternated rounds (bench/NOTES.md v36):
  // lognormal_H16_Sq4 198.6 -> 195.8 us, lognormal_H64 -0.9 %, B32_Sq4 (one wave either
  // way) level. (Device-made plans' counts are not known here: the general kernels.)
  const bool bf16_host_plan = p.header == nullptr && p.partial_format == PartialFormat::kBf16;
  if (bf16_host_plan && p.num_wide_requests == 0) return {8, true, false};
  // With wide requests, the dense kernel (4 or 8 warps) when the grid is more than one
  // wave of the general one: B4_Sq4's 1024 4-warp blocks in one wave instead of 1.29.
  // Three alternated rounds (bench/NOTES.md v37): B4_Sq4 100.8 -> 98.6 us (its combine
  // span +6.4..6.7 -> +4.4..4.6), per-block fp8 level with a span 1.8 us shorter; the
  // cases of one wave keep the general kernel (the dense one for every bf16 combine made
  // kimi, 540 4-warp blocks, +1.7 %: v36).
  return with_combine_warps(p, [&](auto warps) {
    constexpr int kWarps = warps();
    const int64_t one_wave = int64_t{p.sm_count} * combine_blocks_per_sm(kWarps, kGeneral);
    const bool dense = bf16_host_plan && kWarps < 16 && p.sm_count > 0 && blocks_with<kWarps>(p) > one_wave;
    return CombineKernelChoice{kWarps, false, dense};
  });
}

bool combine_fits_one_wave(const CombineParams& p) {
  if (p.sm_count <= 0) return false;
  const CombineKernelChoice k = combine_kernel_choice(p);
  const int form = k.narrow_only ? kNarrowOnly : k.dense ? kDense : kGeneral;
  return combine_blocks(p) <= int64_t{p.sm_count} * combine_blocks_per_sm(k.warps, form);
}

void launch_combine(const CombineParams& p, cudaStream_t stream) {
  const CombineKernelChoice k = combine_kernel_choice(p);
  if (k.narrow_only) return launch_combine_with<8, __nv_bfloat16, kNarrowOnly>(p, stream);
  with_combine_warps(p, [&](auto warps) {
    constexpr int kWarps = warps();
    auto launch = [&](auto invariant) {
      constexpr bool kInvariant = decltype(invariant)::value;
      if (p.partial_format == PartialFormat::kFp32) {
        return launch_combine_with<kWarps, float, kGeneral, kInvariant>(p, stream);
      }
      if constexpr (kWarps < 16) {
        if (k.dense) return launch_combine_with<kWarps, __nv_bfloat16, kDense, kInvariant>(p, stream);
      }
      launch_combine_with<kWarps, __nv_bfloat16, kGeneral, kInvariant>(p, stream);
    };
    // Batch-invariant plans: the wide merges in the 16-virtual-warp order (combine_wide);
    // 16-warp blocks sum in that order already.
    if constexpr (kWarps < kInvariantVirtualWarps) {
      if (p.invariant_order) return launch(std::true_type{});
    }
    launch(std::false_type{});
  });
}

}  // namespace kbmla
