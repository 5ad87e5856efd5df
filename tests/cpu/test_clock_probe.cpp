// kbmla bench's clock probe (tools/clock_probe.cpp): NVML opened at run time. Without the
// driver (CI) it reports why and samples nothing; with it (the GPU machine) it samples a
// plausible SM clock.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tools/clock_probe.hpp"

namespace kbmla::tools {
namespace {

TEST(ClockProbe, SamplesOnlyWhereNvmlAnswers) {
  ClockProbe probe(0);
  EXPECT_EQ(probe.available(), probe.unavailable_reason().empty());
  probe.start(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const ClockSummary s = probe.stop();
  if (!probe.available()) {
    EXPECT_EQ(s.samples, 0);
    EXPECT_EQ(s.describe(), "-");
    GTEST_SKIP() << "no NVML here: " << probe.unavailable_reason();
  }
  ASSERT_GT(s.samples, 0);
  EXPECT_GT(s.min_sm_mhz, 0.0);
  EXPECT_LE(s.min_sm_mhz, s.mean_sm_mhz);
  EXPECT_LT(s.mean_sm_mhz, 5000.0);
  EXPECT_GE(s.power_capped, 0.0);
  EXPECT_LE(s.power_capped, 1.0);
  // A second measurement starts from nothing.
  probe.start(1);
  const ClockSummary t = probe.stop();
  EXPECT_LE(t.samples, 2);
}

TEST(ClockProbe, DescribesASummary) {
  const ClockSummary s{10, 1650.4, 1485, 0.5};
  EXPECT_EQ(s.describe(), "1650 MHz (min 1485), power cap 50 %");
}

}  // namespace
}  // namespace kbmla::tools
