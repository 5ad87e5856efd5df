// Device discovery and small device utilities. query_device() never throws: on a machine
// without a usable GPU it says why, so tools and GPU tests can skip with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kbmla/helpers.hpp"

namespace kbmla {

struct DeviceInfo {
  bool present = false;         // a CUDA device answered
  bool supported = false;       // compute capability 9.0 (this build's sm_90a kernels)
  int ordinal = 0;
  ComputeCapability cc{0, 0};
  int sm_count = 0;
  size_t l2_bytes = 0;
  std::string name;
  std::string reason;           // why not present / not supported
};

DeviceInfo query_device(int ordinal = 0);

// Fills `count` bf16 values at `ptr` with uniform values in [-1, 1) from a counter hash
// of (seed, index): the same seed gives the same bytes. For benchmarks, whose caches are
// too large to generate on the host.
void fill_device_random_bf16(void* ptr, size_t count, uint64_t seed, void* stream);
// The same values quantised to e4m3 with `scale` (byte = e4m3(value / scale)).
void fill_device_random_e4m3(void* ptr, size_t count, float scale, uint64_t seed, void* stream);
// `tokens` 656-byte tokens of the per-block fp8 cache (KvDtype::kFp8E4m3PerBlock): values
// in [-1, 1), each group of 128 with its own scale in [1, 2) / 448, the rope in bf16.
void fill_device_random_fp8_block(void* ptr, size_t tokens, uint64_t seed, void* stream);
// Launches a kernel of one warp that does nothing: the benchmark's floor for the launch
// latency a timed call cannot avoid.
void launch_empty_kernel(void* stream);

}  // namespace kbmla
