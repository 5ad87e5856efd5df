// Benchmark cases file (bench/cases.json): the public cases with the best public
// kernel's figures, plus the project's own cases.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kbmla/decode.hpp"

namespace kbmla::tools {

struct BenchCase {
  std::string name;
  int batch = 0;
  int q_len = 1;
  int heads = 16;
  int d_qk = 576;  // 576, or 512 (no rope part)
  int page_size = 64;  // tokens per cache page: a power of two in 1..256
  KvDtype kv_dtype = KvDtype::kBFloat16;  // "kv_dtype": "bf16" (default), "fp8_e4m3", "fp8_e4m3_block"
  std::vector<int> seqlens;
  std::optional<double> reference_pct_of_copy;
  std::optional<double> reference_tflops;
};

// "bf16", "fp8_e4m3" or "fp8_e4m3_block" (kv_dtype_name's names); throws naming `who`.
KvDtype kv_dtype_from_name(const std::string& name, const std::string& who);

// Throws kbmla::Error naming the file and the problem.
std::vector<BenchCase> load_cases(const std::string& path);
const BenchCase& find_case(const std::vector<BenchCase>& cases, const std::string& name);
// "1000,77,0" -> {1000, 77, 0}; throws kbmla::Error naming a token that is not an integer
// in 0..2^31-1.
std::vector<int32_t> parse_seqlens_csv(const std::string& csv);

// The cases file shipped with the source tree (compile-time path), or $KBMLA_CASES.
std::string default_cases_path();

}  // namespace kbmla::tools
