// kbmla bench --svg-dir's timeline (tools/balance_svg.cpp): a panel per policy, a bar per
// busy CTA on a common time axis; nothing written without intervals; a clear error for a
// path it cannot write.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kbmla/error.hpp"
#include "tools/balance_svg.hpp"

namespace kbmla::tools {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(BalanceSvg, APanelPerPolicyAndABarPerCta) {
  const std::string path = testing::TempDir() + "kbmla_balance.svg";
  std::remove(path.c_str());
  const std::vector<BalancePanel> panels = {
      {"worklist", 1.02, {{0.0, 10.0, 0}, {1.0, 9.5, 1}, {0.5, 10.2, 2}}},
      {"static", 1.80, {{0.0, 18.0, 0}, {0.0, 4.0, 1}}},
  };
  write_balance_svg(path, "skew", panels);
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string svg = ss.str();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "fill='#3b6ea8'"), 5u);  // one bar per interval
  EXPECT_NE(svg.find("worklist (busy max/mean 1.020)"), std::string::npos);
  EXPECT_NE(svg.find("static (busy max/mean 1.800)"), std::string::npos);
  EXPECT_NE(svg.find("common time axis 18 us"), std::string::npos);  // 0 .. 18 over both panels
  std::remove(path.c_str());
}

TEST(BalanceSvg, WritesNothingWithoutIntervals) {
  const std::string path = testing::TempDir() + "kbmla_balance_empty.svg";
  std::remove(path.c_str());
  write_balance_svg(path, "none", {{"worklist", 0, {}}});
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(BalanceSvg, NamesAPathItCannotWrite) {
  try {
    write_balance_svg("/nonexistent-dir/x.svg", "c", {{"worklist", 1, {{0, 1, 0}}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.svg"), std::string::npos);
  }
}

}  // namespace
}  // namespace kbmla::tools
