// The shared-memory carveout of the short kernels a decode call runs beside the decode
// (the combine, the fp8 Q quantiser, the device planner): the largest, the split every
// decode kernel needs for its ~227 KiB a CTA. Left to the driver, a kernel that asks for
// little shared memory may get a smaller carveout (more L1), and an SM changes its split
// only when idle, between the kernels of a call. KBMLA_CARVEOUT=never leaves the driver's
// choice (comparisons; bench/NOTES.md v49).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"

namespace kbmla {

inline bool max_shared_carveout_wanted() {
  static const bool wanted = [] {
    const char* e = std::getenv("KBMLA_CARVEOUT");
    if (e == nullptr || std::strcmp(e, "auto") == 0) return true;
    require(std::strcmp(e, "never") == 0, "KBMLA_CARVEOUT='", e, "' must be auto or never");
    return false;
  }();
  return wanted;
}

// Once per kernel and device (a function attribute belongs to the device's context).
template <auto Kernel>
void use_max_shared_carveout(const char* who) {
  if (!max_shared_carveout_wanted()) return;
  static PerDevice<bool> done;
  done.get([who](int device) {
    const cudaError_t err =
        cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared));
    require(err == cudaSuccess, who, ": cannot set the shared-memory carveout on device ", device, ": ",
            cudaGetErrorString(err));
    return true;
  });
}

}  // namespace kbmla
