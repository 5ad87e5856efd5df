// Conversion-throughput probe (bench/NOTES.md v53): one CTA of 1, 4, 8 or 16 warps, each
// thread eight independent chains of one conversion (or HMUL2, or five integer ops) and an
// XOR, 4,000 rounds, clock64 around the loop; prints cycles per warp-instruction of one
// warp. With the warps spread over the four sub-partitions (4 or more warps), that figure
// divided by warps / 4 is a sub-partition's cost of one warp-instruction (16 warps, 16.3
// cycles: ~4.1 for each conversion on the H200, bench/results/logs-v53).
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -cudart static
// -o build-alt/conversion_probe bench/conversion_probe.cu
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>

enum Op { kE4m3ToF16, kF16ToE4m3, kF32ToE4m3, kIntOps, kHmul2, kOps };
const char* const kNames[kOps] = {"e4m3x2 -> f16x2", "f16x2 -> e4m3x2", "f32x2 -> e4m3x2", "5 integer ops", "hmul2"};

template <int kOp>
__global__ void chains(uint32_t* out, long long* cycles, int rounds, uint32_t seed) {
  uint32_t v[8];
  for (int i = 0; i < 8; ++i) v[i] = seed * (threadIdx.x + 1) * (i + 3);
  __syncthreads();
  const long long t0 = clock64();
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (kOp == kE4m3ToF16) {
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v[i] & 0xffffu), __NV_E4M3);
        v[i] ^= *reinterpret_cast<uint32_t*>(&h);
      } else if constexpr (kOp == kF16ToE4m3) {
        v[i] ^= __nv_cvt_halfraw2_to_fp8x2(*reinterpret_cast<__half2_raw*>(&v[i]), __NV_SATFINITE, __NV_E4M3);
      } else if constexpr (kOp == kF32ToE4m3) {
        const float2 f = make_float2(__uint_as_float(v[i]), __uint_as_float(v[i] + 1));
        v[i] ^= __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
      } else if constexpr (kOp == kIntOps) {
        v[i] = (((v[i] << 8) & 0x80008000u) | ((v[i] & 0x007f007fu) << 7)) ^ v[i];
      } else {
        __half2 h = *reinterpret_cast<__half2*>(&v[i]);
        h = __hmul2(h, __floats2half2_rn(0.99f, 1.01f));
        v[i] = *reinterpret_cast<uint32_t*>(&h) ^ 1u;
      }
    }
  }
  const long long t1 = clock64();
  uint32_t x = 0;
  for (int i = 0; i < 8; ++i) x ^= v[i];
  out[threadIdx.x] = x;  // keeps the chains
  if (threadIdx.x == 0) *cycles = t1 - t0;
}

int main() {
  uint32_t* out = nullptr;
  long long* cycles = nullptr;
  if (cudaMalloc(&out, 4096) != cudaSuccess || cudaMalloc(&cycles, sizeof(long long)) != cudaSuccess) {
    std::printf("conversion_probe: no GPU memory\n");
    return 1;
  }
  constexpr int kRounds = 4000;
  for (int warps : {1, 4, 8, 16}) {
    for (int op = 0; op < kOps; ++op) {
      const dim3 block(32 * warps);
      for (int rep = 0; rep < 2; ++rep) {  // the second run is timed
        switch (op) {
          case kE4m3ToF16: chains<kE4m3ToF16><<<1, block>>>(out, cycles, kRounds, 7); break;
          case kF16ToE4m3: chains<kF16ToE4m3><<<1, block>>>(out, cycles, kRounds, 7); break;
          case kF32ToE4m3: chains<kF32ToE4m3><<<1, block>>>(out, cycles, kRounds, 7); break;
          case kIntOps: chains<kIntOps><<<1, block>>>(out, cycles, kRounds, 7); break;
          default: chains<kHmul2><<<1, block>>>(out, cycles, kRounds, 7); break;
        }
      }
      long long c = 0;
      if (cudaMemcpy(&c, cycles, sizeof c, cudaMemcpyDeviceToHost) != cudaSuccess) {
        std::printf("conversion_probe: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      std::printf("warps %2d  %-16s %6.2f cycles per warp-instruction of one warp\n", warps, kNames[op],
                  double(c) / (kRounds * 8.0));
    }
  }
  return 0;
}
