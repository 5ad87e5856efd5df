#include "tools/bench_timing.hpp"

#include "kbmla/device.hpp"

namespace kbmla::tools {

double measure_copy_gbps(cudaStream_t stream) {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer src(bytes), dst(bytes);
  fill_device_random_bf16(src.ptr, bytes / 2, 1, stream);
  const double us = median_us([&](int) { cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream); },
                              20, 3, stream);
  return 2.0 * double(bytes) / (us * 1e3);
}

}  // namespace kbmla::tools
