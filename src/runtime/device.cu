#include "kbmla/device.hpp"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

__global__ void fill_random_bf16_kernel(uint16_t* ptr, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    // 8 random mantissa bits, exponent of [1, 2), minus 1.5 then times 2: [-1, 1).
    const float f = (__uint_as_float(0x3f800000u | (uint32_t(h) & 0x7fffffu)) - 1.5f) * 2.f;
    ptr[i] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}

__global__ void fill_random_e4m3_kernel(uint8_t* ptr, size_t count, uint64_t seed, float inv_scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float f = (__uint_as_float(0x3f800000u | (uint32_t(h) & 0x7fffffu)) - 1.5f) * 2.f;
    ptr[i] = __nv_cvt_float_to_fp8(f * inv_scale, __NV_SATFINITE, __NV_E4M3);
  }
}

// Per-block fp8 tokens of random values in [-1, 1): bytes 0..511 e4m3(value / scale) with
// scale = 1/448 x (1 + hash) (in [1, 2) / 448, one per 128 values), bytes 512..527 the
// four scales, bytes 528..655 64 bf16 values. One thread per 16-byte chunk of a token.
__global__ void fill_random_fp8_block_kernel(uint8_t* ptr, size_t tokens, uint64_t seed) {
  const size_t chunks = tokens * 41;
  for (size_t c = blockIdx.x * size_t(blockDim.x) + threadIdx.x; c < chunks; c += size_t(gridDim.x) * blockDim.x) {
    const size_t token = c / 41;
    const int k = int(c % 41);
    auto value = [&](int j) {
      const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + token * 656 + j);
      return (__uint_as_float(0x3f800000u | (uint32_t(h) & 0x7fffffu)) - 1.5f) * 2.f;
    };
    auto scale_of = [&](int g) {
      const uint64_t h = mix64((seed + 1) * 0x9e3779b97f4a7c15ull + token * 4 + g);
      return __uint_as_float(0x3f800000u | (uint32_t(h) & 0x7fffffu)) / 448.f;
    };
    uint8_t bytes[16];
    if (k < 32) {
      const float inv = 1.f / scale_of(k / 8);
      for (int j = 0; j < 16; ++j) bytes[j] = __nv_cvt_float_to_fp8(value(16 * k + j) * inv, __NV_SATFINITE, __NV_E4M3);
    } else if (k == 32) {
      for (int g = 0; g < 4; ++g) {
        const float sc = scale_of(g);
        memcpy(bytes + 4 * g, &sc, 4);
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        const uint16_t b = static_cast<uint16_t>(__float_as_uint(value(512 + 8 * (k - 33) + j)) >> 16);
        memcpy(bytes + 2 * j, &b, 2);
      }
    }
    memcpy(ptr + token * 656 + 16 * k, bytes, 16);
  }
}

}  // namespace

void fill_device_random_fp8_block(void* ptr, size_t tokens, uint64_t seed, void* stream) {
  require(ptr != nullptr || tokens == 0, "fill_device_random_fp8_block: null pointer with ", tokens, " tokens");
  if (tokens == 0) return;
  const int blocks = static_cast<int>(std::min<size_t>((tokens * 41 + 255) / 256, 8192));
  fill_random_fp8_block_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint8_t*>(ptr),
                                                                                       tokens, seed);
  cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "fill_device_random_fp8_block: launch failed: ", cudaGetErrorString(err));
}

namespace {
__global__ void empty_kernel() {}
}  // namespace

void launch_empty_kernel(void* stream) {
  empty_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "launch_empty_kernel: launch failed: ", cudaGetErrorString(err));
}

void fill_device_random_e4m3(void* ptr, size_t count, float scale, uint64_t seed, void* stream) {
  require(ptr != nullptr || count == 0, "fill_device_random_e4m3: null pointer with count ", count);
  require(scale > 0.f, "fill_device_random_e4m3: scale (", scale, ") must be positive");
  if (count == 0) return;
  const int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 8192));
  fill_random_e4m3_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint8_t*>(ptr), count,
                                                                                   seed, 1.f / scale);
  cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "fill_device_random_e4m3: launch failed: ", cudaGetErrorString(err));
}

void fill_device_random_bf16(void* ptr, size_t count, uint64_t seed, void* stream) {
  require(ptr != nullptr || count == 0, "fill_device_random_bf16: null pointer with count ", count);
  if (count == 0) return;
  const int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 8192));
  fill_random_bf16_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint16_t*>(ptr), count,
                                                                                   seed);
  cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "fill_device_random_bf16: launch failed: ", cudaGetErrorString(err));
}

DeviceInfo query_device(int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    info.reason = err != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(err)
                                     : std::string("no CUDA device found");
    cudaGetLastError();
    return info;
  }
  if (ordinal < 0 || ordinal >= count) {
    info.reason = detail::concat("device ordinal ", ordinal, " out of range 0..", count - 1);
    return info;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    info.reason = std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(err);
    return info;
  }
  info.present = true;
  info.cc = {prop.major, prop.minor};
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  info.name = prop.name;
  info.supported = info.cc == ComputeCapability{9, 0};
  if (!info.supported) {
    info.reason = detail::concat(info.name, " has compute capability ", prop.major, ".", prop.minor,
                                 "; this build runs sm_90a kernels (compute capability 9.0) only");
  }
  return info;
}


}  // namespace kbmla
