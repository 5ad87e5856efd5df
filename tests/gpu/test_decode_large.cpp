// GPU large-context tier (issue 5): one 1,048,576-token request (16 heads, q_len 4) whose
// pages sit, shuffled, in a cache of more than 2^31 elements, so every page offset and
// block-table product must be 64-bit; checked against the float64 reference.
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

TEST(GpuLarge, MillionTokenRequestInACacheBeyond2To31Elements) {
  KBMLA_REQUIRE_SM90();
  GpuCase c{16, 4, {1 << 20}};
  // 16,384 used pages + 45,000 NaN pages = 61,384 pages x 64 x 576 = 2.26e9 elements.
  c.spare_pages = 45000;
  const int64_t elements = (int64_t{1 << 20} / 64 + c.spare_pages) * 64 * 576;
  ASSERT_GT(elements, int64_t{1} << 31);
  expect_accurate(c, run_gpu_case(c));
}

}  // namespace
}  // namespace kbmla::test
