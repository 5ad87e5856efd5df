// The workspace's error word: its reset and its reading (kbmla/decode.hpp).
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {

namespace {
void check_cuda(cudaError_t err, const char* what) {
  require(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}
}  // namespace

void init_workspace(void* workspace, size_t bytes, void* stream) {
  require(workspace != nullptr && bytes >= kWorkspaceAlign, "init_workspace: need a workspace of at least ",
          kWorkspaceAlign, " bytes, got ", bytes, workspace == nullptr ? " (null)" : "");
  // The header: error word and CombineSync zeroed, its `ready` mark, and a first epoch
  // from the host clock (ns), so that the piece flags a workspace kept from calls before
  // this init (epochs counted up from an earlier clock reading, one a call) never equal a
  // later call's.
  uint8_t* const sync = static_cast<uint8_t*>(workspace) + kCombineSyncOffset;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  check_cuda(cudaMemsetAsync(workspace, 0, kWorkspaceAlign, s), "init_workspace: cudaMemsetAsync");
  check_cuda(cudaMemsetAsync(sync + offsetof(CombineSync, ready), kCombineSyncReadyByte, sizeof(uint64_t), s),
             "init_workspace: cudaMemsetAsync");
  const uint64_t epoch = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  // (Pageable source: the copy has taken the value when the call returns.)
  check_cuda(cudaMemcpyAsync(sync + offsetof(CombineSync, epoch), &epoch, sizeof epoch, cudaMemcpyHostToDevice, s),
             "init_workspace: cudaMemcpyAsync");
}

uint32_t read_device_errors(const void* workspace, void* stream) {
  require(workspace != nullptr, "read_device_errors: workspace is null");
  uint32_t bits = 0;
  check_cuda(cudaMemcpyAsync(&bits, workspace, sizeof bits, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
             "read_device_errors: copy");
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "read_device_errors: synchronize");
  return bits;
}

std::string describe_device_errors(uint32_t bits) {
  if (bits == 0) return "no device errors";
  std::string s;
  auto add = [&](uint32_t bit, const char* text) {
    if (bits & bit) s += (s.empty() ? "" : "; ") + std::string(text);
  };
  add(kErrSeqlenNegative, "a seqlen is negative");
  add(kErrSeqlenBeyondBlockTable, "a seqlen exceeds max_pages x page_size of the block table");
  add(kErrPageIndexOutOfRange, "a block-table entry is outside [0, num_pages)");
  add(kErrPlanMismatch, "device seqlens differ from the seqlens the plan was made for");
  add(kErrPlanFailed, "the device planner rejected the seqlens (a negative seqlen)");
  add(kErrDcpPositions,
      "context parallel: a local seqlen or kv offset that the request's global seqlen cannot have");
  return s;
}

}  // namespace kbmla
