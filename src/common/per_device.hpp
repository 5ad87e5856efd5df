// A value per CUDA device ordinal of the calling thread's current device, made once by the
// caller's `make(device)` under a lock: device queries and function attributes belong to a
// device (its context), and engines drive one GPU per thread.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <optional>
#include <vector>

namespace kbmla {

template <class T>
class PerDevice {
 public:
  template <class Make>
  T get(Make&& make) {
    int device = 0;
    cudaGetDevice(&device);
    std::lock_guard<std::mutex> lock(mutex_);
    if (size_t(device) >= slots_.size()) slots_.resize(size_t(device) + 1);
    std::optional<T>& slot = slots_[size_t(device)];
    if (!slot) slot = make(device);  // a throwing make leaves the slot empty: asked again next time
    return *slot;
  }

 private:
  std::mutex mutex_;
  std::vector<std::optional<T>> slots_;
};

// A kernel's opt-in to `bytes` of dynamic shared memory (above the default 48 KiB), made once
// per kernel and device: the attribute belongs to the device's context, so a process that
// drives several GPUs (a thread each) needs it on every one. Returns the attempt's result.
template <auto Kernel>
cudaError_t reserve_dynamic_smem(int bytes) {
  static PerDevice<cudaError_t> reserved;
  return reserved.get(
      [bytes](int) { return cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); });
}

}  // namespace kbmla
