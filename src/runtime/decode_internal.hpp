// Internal entry for tools: decode with a ceiling-spike kernel mode (bench --spike).
#pragma once

#include "kbmla/decode.hpp"
#include "src/sm90/decode/params.hpp"

namespace kbmla::detail {

// As kbmla::decode, with the kernel's mode chosen; the combine runs only for kFull.
void decode_with_mode(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& args, sm90::KernelMode mode);

}  // namespace kbmla::detail
