#include "tools/clock_probe.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace kbmla::tools {

namespace {
// The few NVML entry points used, with their C signatures (nvml.h is not installed with
// the toolkit here; these are stable since NVML 10).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlClockSm = 1;
// nvmlClocksEventReasonSwPowerCap: the driver lowered the clock to stay under the power limit.
constexpr unsigned long long kSwPowerCap = 0x4ull;
}  // namespace

struct ClockProbe::Library {
  void* handle = nullptr;
  NvmlReturn (*shutdown)() = nullptr;  // set once nvmlInit succeeded
  NvmlReturn (*by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  ~Library() {
    if (shutdown != nullptr) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
};

std::string ClockSummary::describe() const {
  if (samples == 0) return "-";
  return fmt::format("{:.0f} MHz (min {:.0f}), power cap {:.0f} %", mean_sm_mhz, min_sm_mhz, 100.0 * power_capped);
}

ClockProbe::ClockProbe(int cuda_device) : lib_(std::make_unique<Library>()) {
  Library& l = *lib_;
  l.handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (l.handle == nullptr) {
    reason_ = "libnvidia-ml.so.1 not found";
    return;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(l.handle, name));
    return fn != nullptr;
  };
  NvmlReturn (*init)() = nullptr;
  if (!sym(init, "nvmlInit_v2") || !sym(l.by_pci, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !sym(l.clock, "nvmlDeviceGetClockInfo")) {
    reason_ = "NVML lacks an entry point";
    return;
  }
  // The newer name first; the older one is the same call.
  if (!sym(l.reasons, "nvmlDeviceGetCurrentClocksEventReasons")) sym(l.reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (init() != kNvmlSuccess) {
    reason_ = "nvmlInit failed";
    return;
  }
  sym(l.shutdown, "nvmlShutdown");
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess) {
    reason_ = "no PCI bus id for the CUDA device";
    return;
  }
  NvmlDevice dev = nullptr;
  if (l.by_pci(bus, &dev) != kNvmlSuccess) {
    reason_ = fmt::format("NVML has no device at {}", bus);
    return;
  }
  device_ = dev;
}

ClockProbe::~ClockProbe() {
  if (running_) stop();
}

void ClockProbe::start(int period_ms) {
  if (running_) stop();
  acc_ = ClockSummary{};
  if (!available()) return;
  running_ = true;
  sampler_ = std::thread([this, period_ms] {
    double sum = 0, capped = 0, lo = 1e9;
    int n = 0;
    while (running_) {
      unsigned mhz = 0;
      unsigned long long why = 0;
      if (lib_->clock(device_, kNvmlClockSm, &mhz) == kNvmlSuccess) {
        if (lib_->reasons != nullptr && lib_->reasons(device_, &why) != kNvmlSuccess) why = 0;
        sum += mhz;
        lo = std::min(lo, double(mhz));
        capped += (why & kSwPowerCap) != 0 ? 1 : 0;
        ++n;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
    }
    if (n > 0) acc_ = ClockSummary{n, sum / n, lo, capped / n};
  });
}

ClockSummary ClockProbe::stop() {
  if (!running_) return acc_;
  running_ = false;
  sampler_.join();
  return acc_;
}

}  // namespace kbmla::tools
