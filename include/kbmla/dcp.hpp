// Decode context parallelism (DCP): each rank holds part of every request's keys
// (DecodeConfig::dcp_layout), decodes them into a partial result (out + LSE, rows that see
// no local key: O = 0, LSE = -inf), and the ranks' partials are merged by LSE:
//   out = sum_r exp(lse_r - lse) out_r,  lse = log sum_r exp(lse_r).
//
//   kbmla::DcpPartial part = kbmla::dcp_partial(partial_buf, batch, q_len, heads);
//   args.out = part.out; args.lse = part.lse;          // dense, natural-log LSE
//   kbmla::decode(plan, cache, args);                  // config.dcp_world = world, ...
//   kbmla::dcp_allgather_merge(nccl_comm, partial_buf, merge_args);  // or: your all-gather, then dcp_merge
//
// A partial is one buffer (out bf16 [rows, 512], then LSE fp32 [rows]) so that one
// all-gather moves it; the gathered buffer holds the world's partials in rank order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kbmla/decode.hpp"

namespace kbmla {

struct DcpPartialLayout {
  size_t out_offset;  // bf16 [batch * q_len * heads, 512]
  size_t lse_offset;  // fp32 [batch * q_len * heads], natural log
  size_t bytes;       // of one rank's partial (a multiple of 256)
};
DcpPartialLayout dcp_partial_layout(int batch, int q_len, int heads);

// The out / lse pointers of a partial buffer (256-byte aligned, dcp_partial_layout bytes).
struct DcpPartial {
  void* out;
  float* lse;
};
DcpPartial dcp_partial(void* partial, int batch, int q_len, int heads);

struct DcpMergeArgs {
  const void* gathered = nullptr;  // world partials back to back, each dcp_partial_layout().bytes
  int world = 1;                   // 1..1024
  int batch = 0, q_len = 1, heads = 1;
  void* out = nullptr;             // bf16 [batch, q_len, heads, 512], 16-byte aligned
  RowStrides out_strides;          // as DecodeArgs::out_strides
  float* lse = nullptr;            // fp32 [batch, q_len, heads]
  RowStrides lse_strides;
  LseBase lse_base = LseBase::kE;
  void* stream = nullptr;          // cudaStream_t
};

// Merges gathered partials on the stream (one small kernel; no allocation, no sync).
void dcp_merge(const DcpMergeArgs& args);

// NCCL path: all-gathers this rank's partial (`partial`, dcp_partial_layout().bytes) into
// args.gathered (world x that, on this rank's device) over `nccl_comm` (an ncclComm_t of
// args.world ranks, this rank's position in it = its DCP rank), then merges, all on
// args.stream. NCCL is loaded at run time (dlopen of $KBMLA_NCCL_LIBRARY, else
// libnccl.so.2: the one the engine already loaded is reused), so the library itself does
// not link it; a missing NCCL is reported by a kbmla::Error naming what was tried.
void dcp_allgather_merge(void* nccl_comm, const void* partial, const DcpMergeArgs& args);

}  // namespace kbmla
