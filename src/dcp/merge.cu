// Merge of decode-context-parallel partials by LSE (see kbmla/dcp.hpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kbmla/dcp.hpp"
#include "kbmla/error.hpp"
#include "src/common/rows.hpp"
#include "src/runtime/tensor_maps.hpp"

namespace kbmla {

namespace {

constexpr int kDv = 512;
constexpr int kMaxWorld = 1024;
constexpr int kWarpsPerBlock = 8;

struct MergeParams {
  const uint8_t* gathered;
  size_t partial_bytes, lse_offset;
  int world, rows, rows_per_request;
  OutputView output;
};

// One warp per row: lane l owns columns [16 l, 16 l + 16) (two 16-byte loads per rank).
// Ranks whose LSE is -inf (no visible local key) weigh 0 and are never read.
__global__ void __launch_bounds__(kWarpsPerBlock * 32) dcp_merge_kernel(const __grid_constant__ MergeParams p) {
  const int warp = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= p.rows) return;
  const int b = warp / p.rows_per_request, row = warp % p.rows_per_request;
  const float neg_inf = -__int_as_float(0x7f800000);
  auto lse_of = [&](int r) {
    return reinterpret_cast<const float*>(p.gathered + size_t(r) * p.partial_bytes + p.lse_offset)[warp];
  };
  float m = neg_inf;
  for (int r = lane; r < p.world; r += 32) m = fmaxf(m, lse_of(r));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = 0.f;
  float sum = 0.f;
  if (m != neg_inf) {
    for (int r = 0; r < p.world; ++r) {
      const float l = lse_of(r);
      if (l == neg_inf) continue;
      const float w = __expf(l - m);
      sum += w;
      const uint4* src = reinterpret_cast<const uint4*>(p.gathered + size_t(r) * p.partial_bytes) +
                         (size_t(warp) * kDv + lane * 16) / 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = src[h];
        const __nv_bfloat162* e = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(e[j]);
          acc[8 * h + 2 * j] += w * f.x;
          acc[8 * h + 2 * j + 1] += w * f.y;
        }
      }
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const OutputView& o = p.output;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(o.out) + row_offset(o.out_strides, b, row, o.heads) + lane * 16;
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    *reinterpret_cast<__nv_bfloat162*>(out + i) = __floats2bfloat162_rn(acc[i] * inv, acc[i + 1] * inv);
  }
  if (lane == 0) {
    // Natural log in the partials; the caller's base out (lse_scale turns log2 into it).
    const float lse_e = sum > 0.f ? m + __logf(sum) : neg_inf;
    o.lse[row_offset(o.lse_strides, b, row, o.heads)] = lse_e * 1.4426950408889634f * o.lse_scale;
  }
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void check_merge_shape(int batch, int q_len, int heads) {
  require(batch >= 1, "dcp: batch (", batch, ") must be >= 1");
  require(q_len >= 1 && q_len <= 16, "dcp: q_len (", q_len, ") must be in 1..16");
  require(heads >= 1 && heads <= 128, "dcp: heads (", heads, ") must be in 1..128");
  require(int64_t{batch} * q_len * heads < (int64_t{1} << 31), "dcp: batch x q_len x heads must be < 2^31");
}

}  // namespace

DcpPartialLayout dcp_partial_layout(int batch, int q_len, int heads) {
  check_merge_shape(batch, q_len, heads);
  const size_t rows = size_t(batch) * q_len * heads;
  DcpPartialLayout l{};
  l.out_offset = 0;
  l.lse_offset = round_up(rows * kDv * 2, 256);
  l.bytes = round_up(l.lse_offset + rows * 4, 256);
  return l;
}

DcpPartial dcp_partial(void* partial, int batch, int q_len, int heads) {
  require(partial != nullptr && detail::aligned(partial, 256), "dcp: the partial buffer must be non-null and ",
          "256-byte aligned");
  const DcpPartialLayout l = dcp_partial_layout(batch, q_len, heads);
  uint8_t* base = static_cast<uint8_t*>(partial);
  return {base + l.out_offset, reinterpret_cast<float*>(base + l.lse_offset)};
}

void dcp_merge(const DcpMergeArgs& a) {
  check_merge_shape(a.batch, a.q_len, a.heads);
  require(a.world >= 1 && a.world <= kMaxWorld, "dcp: world (", a.world, ") must be in 1..", kMaxWorld);
  require(a.gathered != nullptr && detail::aligned(a.gathered, 256),
          "dcp: gathered must be non-null and 256-byte aligned");
  DecodeConfig c;
  c.heads = a.heads;
  c.q_len = a.q_len;
  DecodeArgs d;
  d.out = a.out;
  d.out_strides = a.out_strides;
  d.lse = a.lse;
  d.lse_strides = a.lse_strides;
  d.lse_base = a.lse_base;
  MergeParams p{};
  p.output = detail::output_view(c, a.batch, d, "dcp_merge");
  const DcpPartialLayout l = dcp_partial_layout(a.batch, a.q_len, a.heads);
  p.gathered = static_cast<const uint8_t*>(a.gathered);
  p.partial_bytes = l.bytes;
  p.lse_offset = l.lse_offset;
  p.world = a.world;
  p.rows_per_request = a.q_len * a.heads;
  p.rows = a.batch * p.rows_per_request;
  const int blocks = (p.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  dcp_merge_kernel<<<blocks, kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(a.stream)>>>(p);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "dcp: merge launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
