// Q quantiser of the fp8 decode: one warp per Q row. Each lane reads 9 (d_qk 576) or 8
// (512) bf16 pairs, columns 2 lane + 64 k, so every load of the warp is 128 contiguous
// bytes; the row's max |q| (warp reduction) gives scale = max / 448 and the e4m3 values
// q / scale (saturating: rounding cannot push past 448). A zero row gets scale 1.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kbmla/error.hpp"
#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla::sm90 {

namespace {

constexpr int kWarpsPerBlock = 8;

template <int Pairs>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) quantize_q_kernel(QuantizeQArgs a) {
  // The decode (a programmatic dependent) may launch now: its KV stream does not need Q,
  // its Q loader and consumers wait for this grid (griddepcontrol.wait).
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= a.rows) return;
  const int lane = threadIdx.x % 32;
  const __nv_bfloat162* q = reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(a.q) + row * a.q_row);
  const __nv_bfloat162* pe =
      a.q_pe == nullptr ? nullptr
                        : reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(a.q_pe) + row * a.q_pe_row);
  float2 v[Pairs];
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < Pairs; ++k) {
    const int col = 2 * lane + 64 * k;
    const __nv_bfloat162 x = col < a.latent_cols ? q[col / 2] : pe[(col - a.latent_cols) / 2];
    v[k] = __bfloat1622float2(x);
    amax = fmaxf(amax, fmaxf(fabsf(v[k].x), fabsf(v[k].y)));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float scale = amax > 0.f ? amax / fp8::kE4m3Max : 1.f;
  const float inv = 1.f / scale;
  __nv_fp8x2_storage_t* out = reinterpret_cast<__nv_fp8x2_storage_t*>(a.q8 + row * a.d_qk);
#pragma unroll
  for (int k = 0; k < Pairs; ++k) {
    out[lane + 32 * k] = __nv_cvt_float2_to_fp8x2(make_float2(v[k].x * inv, v[k].y * inv), __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) a.scales[row] = scale;
}

}  // namespace

void launch_quantize_q(const QuantizeQArgs& a, cudaStream_t stream) {
  require(a.d_qk == kDqk || a.d_qk == kDqkNoRope, "quantize_q: d_qk (", a.d_qk, ") must be 576 or 512");
  require(a.rows >= 1, "quantize_q: rows (", a.rows, ") must be >= 1");
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  require(blocks <= 0x7fffffff, "quantize_q: too many rows (", a.rows, ")");
  if (a.d_qk == kDqk) {
    quantize_q_kernel<kDqk / 64><<<unsigned(blocks), 32 * kWarpsPerBlock, 0, stream>>>(a);
  } else {
    quantize_q_kernel<kDqkNoRope / 64><<<unsigned(blocks), 32 * kWarpsPerBlock, 0, stream>>>(a);
  }
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "quantize_q: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla::sm90
