#include "kbmla/device.hpp"

#include <cuda_runtime.h>

#include <cute/tensor.hpp>

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

// One float4 per thread through a CuTe view, grid-stride; the scalar tail is handled by
// the first block.
__global__ void fill_f32_kernel(float* ptr, size_t count, float value) {
  using namespace cute;
  const size_t vec_count = count / 4;
  Tensor vec = make_tensor(make_gmem_ptr(reinterpret_cast<float4*>(ptr)), make_layout(vec_count));
  const float4 v4 = make_float4(value, value, value, value);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vec_count; i += size_t(gridDim.x) * blockDim.x) {
    vec(i) = v4;
  }
  if (blockIdx.x == 0 && threadIdx.x < count % 4) ptr[vec_count * 4 + threadIdx.x] = value;
}

}  // namespace

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

void fill_device_f32(float* ptr, size_t count, float value, void* stream) {
  require(ptr != nullptr || count == 0, "fill_device_f32: null pointer with count ", count);
  require(reinterpret_cast<uintptr_t>(ptr) % 16 == 0, "fill_device_f32: pointer must be 16-byte aligned");
  if (count == 0) return;
  const size_t vec = count / 4;
  const int blocks = static_cast<int>(std::min<size_t>(std::max<size_t>(1, (vec + 255) / 256), 4096));
  fill_f32_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(ptr, count, value);
  cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "fill_device_f32: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
