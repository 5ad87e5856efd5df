// The GPU's SM clock and the reasons the driver holds it below its maximum, sampled while a
// benchmark measurement runs. The H200 runs the 17..128-row decode kernels at its 700 W
// limit: the driver lowers the SM clock (1980 MHz idle, 1450-1850 MHz under the 64-row
// tiles; bench/NOTES.md v35), so a figure means little without the clock it ran at.
// NVML is opened at run time (dlopen of the driver's libnvidia-ml.so.1): no link-time
// dependency, and machines without the driver (CI) simply get no samples.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace kbmla::tools {

struct ClockSummary {
  int samples = 0;             // 0: NVML unavailable (or nothing sampled)
  double mean_sm_mhz = 0;      // mean SM clock over the samples
  double min_sm_mhz = 0;
  double power_capped = 0;     // fraction of samples with the software power cap active
  // "1650 MHz (min 1485), power cap 100 %", or "-" without samples.
  std::string describe() const;
};

class ClockProbe {
 public:
  // cuda_device: the CUDA ordinal the benchmark runs on (matched to NVML by PCI bus id).
  explicit ClockProbe(int cuda_device);
  ~ClockProbe();
  ClockProbe(const ClockProbe&) = delete;
  ClockProbe& operator=(const ClockProbe&) = delete;

  bool available() const { return device_ != nullptr; }
  // Why not available ("" when it is).
  const std::string& unavailable_reason() const { return reason_; }

  // Samples every `period_ms` on a background thread from start() until stop().
  void start(int period_ms = 5);
  ClockSummary stop();

 private:
  struct Library;
  std::unique_ptr<Library> lib_;
  void* device_ = nullptr;
  std::string reason_;
  std::thread sampler_;
  std::atomic<bool> running_{false};
  ClockSummary acc_;
};

}  // namespace kbmla::tools
