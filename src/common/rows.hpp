// Row addressing and key visibility shared by the decode kernel and the combine (host and
// device). A "row" is (query token s, head h) of one request, numbered s * heads + h.
#pragma once

#include <cstdint>

#include "kbmla/fast_divmod.hpp"
#include "kbmla/hd.hpp"

namespace kbmla {

// Element strides of a [batch, q_len, heads, ...] tensor whose last dimension is dense.
struct RowStridesView {
  int64_t batch, token, head;
};

// (row = token * heads + head; `heads` as a multiply-shift divisor: the epilogue runs at
// the consumers' register peak, where an integer divide's temporaries spill.)
KBMLA_HD int64_t row_offset(const RowStridesView& s, int b, int row, const FastDivmod& heads) {
  int head;
  const int token = heads.divmod(row, head);
  return int64_t{b} * s.batch + int64_t{token} * s.token + int64_t{head} * s.head;
}

// Where the results go: out (bf16, 512 columns dense) and LSE, each with its own strides,
// and the factor that turns the kernels' log2 LSE into the stored base (ln 2 for the
// natural log, 1 for base 2).
struct OutputView {
  void* out;
  float* lse;
  RowStridesView out_strides, lse_strides;
  float lse_scale;
  FastDivmod heads;
};

// Which of a request's local keys each row sees. Without decode context parallelism the
// local keys are the request's keys and the causal mask is bottom-right aligned among the
// q_len new tokens. With it (world > 1) this rank holds some of the request's keys: local
// key j is global key j * world + rank (interleaved) or kv_offsets[b] + j (contiguous),
// the request has global_seqlens[b] keys, and query token s sits at global position
// global_seqlens[b] - q_len + s, so the mask compares global positions.
struct KeyVisibility {
  bool causal;
  int q_len;
  FastDivmod heads;
  int world, rank;
  FastDivmod world_div;
  bool interleaved;
  const int32_t* global_seqlens;  // world > 1
  const int32_t* kv_offsets;      // world > 1, contiguous

  // Local keys [0, result) are visible to `row` of request b, which holds L local keys.
  // 32-bit arithmetic throughout: the producer runs this with 40 registers. With
  // consistent() inputs (0 <= first <= G) nothing wraps; with others the wrapped value
  // only picks some count in [0, L] (the clamp), and the kernel reports kErrDcpPositions.
  KBMLA_HD int visible(int b, int L, int row) const {
    if (!causal) return L;
    const int s = heads.div(row);
    int x0 = L - q_len;  // global position of query token 0 minus that of local key 0
    if (world > 1) {
      const uint32_t first = interleaved ? uint32_t(rank) : uint32_t(kv_offsets[b]);
      x0 = int(uint32_t(global_seqlens[b]) - uint32_t(q_len) - first);
    }
    const int x = x0 + s;
    if (x < 0) return 0;
    const int v = (world > 1 && interleaved ? world_div.div(x) : x) + 1;
    return v < L ? v : L;
  }

  // False when the rank's local length cannot come from the global one (DCP only): the
  // interleaved shard of a request of G keys has ceil((G - rank) / world) of them, a
  // contiguous shard must lie inside [0, G).
  KBMLA_HD bool consistent(int b, int L) const {
    if (world <= 1) return true;
    const int G = global_seqlens[b];
    if (G < 0) return false;
    if (interleaved) {
      const uint32_t expect = G > rank ? (uint32_t(G - rank) + uint32_t(world - 1)) / uint32_t(world) : 0u;
      return uint32_t(L) == expect;
    }
    const int first = kv_offsets[b];
    return first >= 0 && first <= G - L;
  }
};

}  // namespace kbmla
