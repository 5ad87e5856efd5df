// kbmla bench's timing: a device buffer, the CUDA-event median of a launch (each run on an
// idle GPU: record, launch, record, synchronise), and the device-to-device copy ceiling.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kbmla/error.hpp"

namespace kbmla::tools {

inline void cuda_check(cudaError_t e, const char* what) {
  require(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { cuda_check(cudaMalloc(&ptr, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class F>
double median_us(F&& launch, int runs, int warmup, cudaStream_t stream) {
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "event");
  cuda_check(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) launch(i);
  std::vector<float> ms(runs);
  for (int i = 0; i < runs; ++i) {
    cuda_check(cudaEventRecord(a, stream), "record");
    launch(i);
    cuda_check(cudaEventRecord(b, stream), "record");
    cuda_check(cudaEventSynchronize(b), "sync");
    cuda_check(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + runs / 2, ms.end());
  return ms[runs / 2] * 1000.0;
}

// 2 GiB device to device, read + written bytes over the median time, GB/s.
double measure_copy_gbps(cudaStream_t stream);

}  // namespace kbmla::tools
