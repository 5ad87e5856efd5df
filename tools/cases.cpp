#include "tools/cases.hpp"

#include <climits>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kbmla/error.hpp"

namespace kbmla::tools {

KvDtype kv_dtype_from_name(const std::string& name, const std::string& who) {
  for (KvDtype d : {KvDtype::kBFloat16, KvDtype::kFp8E4m3, KvDtype::kFp8E4m3PerBlock}) {
    if (name == kv_dtype_name(d)) return d;
  }
  throw Error(detail::concat(who, ": kv_dtype '", name, "' is not one of bf16, fp8_e4m3, fp8_e4m3_block"));
}

std::vector<BenchCase> load_cases(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), "cannot open cases file '", path, "'");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("cases file '", path, "' is not valid JSON: ", e.what()));
  }
  require(doc.contains("cases") && doc["cases"].is_array(), "cases file '", path, "' has no \"cases\" array");
  std::vector<BenchCase> cases;
  for (const auto& c : doc["cases"]) {
    BenchCase bc;
    try {
      bc.name = c.at("name").get<std::string>();
      bc.batch = c.at("batch").get<int>();
      bc.q_len = c.at("q_len").get<int>();
      bc.heads = c.at("heads").get<int>();
      bc.seqlens = c.at("seqlens").get<std::vector<int>>();
      bc.d_qk = c.value("d_qk", 576);
      bc.page_size = c.value("page_size", 64);
      const std::string dtype = c.value("kv_dtype", std::string("bf16"));
      bc.kv_dtype = kv_dtype_from_name(dtype, detail::concat("cases file '", path, "': case '", bc.name, "'"));
      if (c.contains("reference_kernel_pct_of_copy")) {
        bc.reference_pct_of_copy = c["reference_kernel_pct_of_copy"].get<double>();
      }
      if (c.contains("reference_kernel_tflops")) bc.reference_tflops = c["reference_kernel_tflops"].get<double>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(detail::concat("cases file '", path, "': case #", cases.size(), ": ", e.what()));
    }
    require(bc.seqlens.size() == size_t(bc.batch), "cases file '", path, "': case '", bc.name, "' has batch ",
            bc.batch, " but ", bc.seqlens.size(), " seqlens");
    cases.push_back(std::move(bc));
  }
  return cases;
}

const BenchCase& find_case(const std::vector<BenchCase>& cases, const std::string& name) {
  for (const auto& c : cases) {
    if (c.name == name) return c;
  }
  std::string names;
  for (const auto& c : cases) names += "\n  " + c.name;
  throw Error(detail::concat("no case named '", name, "'; known cases:", names));
}

std::vector<int32_t> parse_seqlens_csv(const std::string& csv) {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos <= csv.size()) {
    const size_t comma = csv.find(',', pos);
    const std::string tok = csv.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(tok, &used);
    } catch (...) {
      used = 0;
    }
    require(used == tok.size() && !tok.empty() && v >= 0 && v <= INT32_MAX, "--seqlens: '", tok,
            "' is not an integer in 0..", INT32_MAX);
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string default_cases_path() {
  if (const char* env = std::getenv("KBMLA_CASES")) return env;
  return KBMLA_DEFAULT_CASES;
}

}  // namespace kbmla::tools
