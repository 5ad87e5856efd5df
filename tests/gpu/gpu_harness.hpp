// GPU test harness: the checked cases of tools/check_case.hpp (a random poisoned problem,
// kbmla::decode on it with NaN-poisoned outputs and workspace, the float64 reference) under
// their test names, and the tests' expectations on them.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/error.hpp"
#include "reference/random_problem.hpp"
#include "reference/reference.hpp"
#include "tools/check_case.hpp"

namespace kbmla::check {
inline void PrintTo(const CheckCase& c, std::ostream* os) { *os << describe(c); }
}  // namespace kbmla::check

namespace kbmla::test {

using check::compare_with_reference;
using check::cuda_ok;
using check::DeviceArray;
using check::DeviceProblem;
using check::describe;
using check::make_decode_args;
using check::read_combine_sync;
using check::run_gpu_case;
using GpuCase = check::CheckCase;
using GpuResult = check::CheckResult;

// Skips the calling test (with the reason) unless an sm_90 GPU is present.
#define KBMLA_REQUIRE_SM90()                                                        \
  do {                                                                              \
    static const ::kbmla::DeviceInfo info_ = ::kbmla::query_device();               \
    if (!info_.supported) GTEST_SKIP() << "no sm_90 GPU: " << info_.reason;         \
  } while (0)

// Puts an environment switch (KBMLA_Q_INLINE, KBMLA_EARLY_COMBINE: read per call) back as
// the test found it (set to its value, or unset) when the scope ends, however it ends, so
// that a switch a test sets does not leak into later tests, nor clear one the caller set
// for the whole run.
class RestoreEnvOnExit {
 public:
  explicit RestoreEnvOnExit(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = std::string(v);
  }
  ~RestoreEnvOnExit() {
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  RestoreEnvOnExit(const RestoreEnvOnExit&) = delete;
  RestoreEnvOnExit& operator=(const RestoreEnvOnExit&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// A host-made bf16 plan (work list unless `policy` says otherwise).
inline DevicePlan make_bf16_plan(int heads, int q_len, const std::vector<int32_t>& seqlens, int num_ctas,
                                 double softmax_scale, Policy policy = Policy::kWorkList) {
  DecodeConfig config;
  config.heads = heads;
  config.q_len = q_len;
  config.softmax_scale = float(softmax_scale);
  PlanOptions options;
  options.policy = policy;
  options.num_ctas = num_ctas;
  return DevicePlan::create(config, seqlens, options);
}

// The issues' bars: bf16 output; fp8 caches (Q and P in e4m3) against the reference on
// the dequantised cache: relative error < 5e-2, worst row < 8e-2 (issue 5).
inline void expect_within_bars(const ref::Comparison& cmp, bool fp8) {
  EXPECT_FALSE(cmp.any_nan);
  EXPECT_FALSE(cmp.infinite_lse_mismatch);
  EXPECT_LT(cmp.rel_frobenius, fp8 ? 5e-2 : 1e-2);
  EXPECT_LT(cmp.worst_row_rel, fp8 ? 8e-2 : 3e-2);
  EXPECT_LT(cmp.lse_max_abs, fp8 ? 5e-2 : 1e-3);
}

inline void expect_accurate(const GpuCase& c, const GpuResult& r) {
  SCOPED_TRACE(describe(c));
  EXPECT_EQ(r.device_errors, 0u) << describe_device_errors(r.device_errors);
  const bool fp8 = c.fp8 || c.fp8_block;
  // Every kernel of an fp8 cache takes Q and P as e4m3, the bf16 cache's neither; the bars
  // follow what describe_decode says ran.
  EXPECT_EQ(r.path.fp8_products, fp8) << r.path.summary();
  expect_within_bars(r.cmp, r.path.fp8_products);
  if (fp8) {
    std::printf("fp8 accuracy: rel %.4f worst row %.4f lse %.4f (%s; %s)\n", r.cmp.rel_frobenius,
                r.cmp.worst_row_rel, r.cmp.lse_max_abs, describe(c).c_str(), r.path.kernel.c_str());
  }
}

}  // namespace kbmla::test
