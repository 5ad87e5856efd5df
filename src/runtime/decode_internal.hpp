// Internal entries: decode with a ceiling-spike kernel mode (bench --spike), shared checks.
#pragma once

#include "kbmla/decode.hpp"
#include "src/sm90/decode/params.hpp"

namespace kbmla::detail {

inline bool supported_page_size(int page_size) {
  return page_size >= 1 && page_size <= 256 && (page_size & (page_size - 1)) == 0;
}

// As kbmla::decode, with the kernel's mode chosen; the combine runs only for kFull and
// `with_combine` (false: split requests' outputs are left unwritten — the bench's bound on
// what any combine could save).
void decode_with_mode(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& args, sm90::KernelMode mode,
                      bool with_combine = true);

}  // namespace kbmla::detail
