#include "src/combine/combine.hpp"

#include <cuda_bf16.h>

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

constexpr int kDv = 512;
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ bool row_sees_a_key(const CombineParams& p, int seqlen, int row) {
  if (seqlen <= 0) return false;
  return !p.causal || seqlen - p.q_len + row / p.heads + 1 > 0;
}

__device__ __forceinline__ void write_empty_row(const CombineParams& p, int b, int row, int lane) {
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + (int64_t{b} * p.rows + row) * kDv;
  const uint2 zero = make_uint2(0, 0);
#pragma unroll
  for (int q = 0; q < 4; ++q) *reinterpret_cast<uint2*>(out + q * 128 + lane * 4) = zero;
  if (lane == 0) p.lse[int64_t{b} * p.rows + row] = -__int_as_float(0x7f800000);
}

// One warp per output row. Blocks [0, combine_blocks) merge split requests' rows; the
// rest zero-fill listed q tiles.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    combine_kernel(const __grid_constant__ CombineParams p, int row_groups_per_request, int combine_blocks) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (int(blockIdx.x) >= combine_blocks) {
    const int entry = p.zero_fill[blockIdx.x - combine_blocks];
    const int tile_batch = work_entry_tile_batch(entry);
    const int t = tile_batch / p.batch, b = tile_batch % p.batch;
    const int end = min(p.rows, (t + 1) * p.tile_rows);
    for (int row = t * p.tile_rows + warp; row < end; row += kWarpsPerBlock) write_empty_row(p, b, row, lane);
    return;
  }
  const int b = p.split_requests[blockIdx.x / row_groups_per_request];
  const int row = (blockIdx.x % row_groups_per_request) * kWarpsPerBlock + warp;
  if (row >= p.rows) return;
  if (!row_sees_a_key(p, p.seqlens[b], row)) {
    write_empty_row(p, b, row, lane);
    return;
  }
  const int ns = p.splits.num_splits[b];
  const int64_t slot0 = p.splits.first_slot[b];
  const float neg_inf = -__int_as_float(0x7f800000);
  float max_lse = neg_inf;
  for (int s = lane; s < ns; s += 32) max_lse = fmaxf(max_lse, p.partial_lse[(slot0 + s) * p.rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffff, max_lse, off));
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + (int64_t{b} * p.rows + row) * kDv;
  if (max_lse == neg_inf) {  // every split saw only masked keys
    write_empty_row(p, b, row, lane);
    return;
  }
  float sum = 0.f;
  for (int s = lane; s < ns; s += 32) sum += exp2f(p.partial_lse[(slot0 + s) * p.rows + row] - max_lse);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
  const float lse_log2 = max_lse + log2f(sum);
  float acc[16] = {};
  for (int s = 0; s < ns; ++s) {
    const float l = p.partial_lse[(slot0 + s) * p.rows + row];
    if (l == neg_inf) continue;  // weighs 0; its partial O may be 0/0
    const float w = exp2f(l - lse_log2);
    const float* src = p.partial_o + ((slot0 + s) * p.rows + row) * kDv;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(src + q * 128 + lane * 4);
      acc[4 * q + 0] += w * v.x;
      acc[4 * q + 1] += w * v.y;
      acc[4 * q + 2] += w * v.z;
      acc[4 * q + 3] += w * v.w;
    }
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[4 * q + 0], acc[4 * q + 1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[4 * q + 2], acc[4 * q + 3]);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t*>(&lo);
    packed.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out + q * 128 + lane * 4) = packed;
  }
  if (lane == 0) p.lse[int64_t{b} * p.rows + row] = lse_log2 * 0.69314718055994531f;
}

}  // namespace

void launch_combine(const CombineParams& p, cudaStream_t stream) {
  const int groups = (p.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t combine_blocks = int64_t{p.num_split_requests} * groups;
  const int64_t blocks = combine_blocks + p.num_zero_fill;
  if (blocks == 0) return;
  require(blocks < (int64_t{1} << 31), "combine: ", blocks, " blocks exceed the grid limit");
  combine_kernel<<<unsigned(blocks), kWarpsPerBlock * 32, 0, stream>>>(p, groups, int(combine_blocks));
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "combine: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
