// Every named-barrier id of the decode kernels, in one place, so that the compiler checks
// what a kernel's roles rely on: the ids used together in one kernel differ, and all lie in
// the 16 the hardware has (0 is __syncthreads). The barriers' meaning is documented where
// they are used (consumer_loop.cuh, config_fp8.hpp, the split-role consumers, epilogue.cuh).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kbmla/hd.hpp"

namespace kbmla::sm90 {

// bf16 kernels: the two consumer warpgroups, 256 threads (consumer_loop.cuh).
constexpr uint32_t kBarP = 1;        // P and row_scale of the block are written
constexpr uint32_t kBarPFree = 2;    // consumer 1 finished reading P and row_scale (arrive/sync)
constexpr uint32_t kBarRowStats = 3; // the item's row statistics are written (fp8 consumers too)
// bf16 narrow tiles (consumer_narrow.cuh): consumer 0's four warps, their partial row
// maxima (or sums) are in the scratch.
constexpr uint32_t kBarNarrowReduce = 4;

// fp8 alternating consumers (config_fp8.hpp says what each one orders): per owner
// consumer c, id + c.
constexpr uint32_t kBarFp8StatsReady = 6;  // 6, 7
constexpr uint32_t kBarFp8OwnerP = 8;      // 8, 9
constexpr uint32_t kBarFp8QReady = 12;     // both consumers wrote their rows of Q
// The block's P is written: two ids per owner, alternating with the parity of
// block_count / 2 (the owner may write its next block's P before the other synced on this one).
KBMLA_HD constexpr uint32_t p_ready_barrier(int owner, int block_count) {
  return ((block_count >> 1) & 1 ? 10u : 4u) + uint32_t(owner);  // 4, 5 or 10, 11
}

// Split-role fp8 kernels: the softmax warpgroup's four warps wrote the item's quantised Q
// (consumer_fp8_split.cuh).
constexpr uint32_t kBarSplitSoftmaxQ = 13;

// Every kernel: the 256 writers of an item's partials before the piece flag (epilogue.cuh).
constexpr uint32_t kBarPartialsWritten = 14;

namespace barrier_ids {
constexpr bool valid_and_distinct(std::initializer_list<uint32_t> ids) {
  for (const uint32_t* a = ids.begin(); a != ids.end(); ++a) {
    if (*a == 0 || *a > 15) return false;
    for (const uint32_t* b = a + 1; b != ids.end(); ++b) {
      if (*a == *b) return false;
    }
  }
  return true;
}
}  // namespace barrier_ids

static_assert(barrier_ids::valid_and_distinct({kBarP, kBarPFree, kBarRowStats, kBarNarrowReduce, kBarPartialsWritten}),
              "the bf16 kernels' named barriers");
static_assert(barrier_ids::valid_and_distinct({kBarRowStats, kBarFp8StatsReady, kBarFp8StatsReady + 1, kBarFp8OwnerP,
                                               kBarFp8OwnerP + 1, kBarFp8QReady, p_ready_barrier(0, 0),
                                               p_ready_barrier(1, 0), p_ready_barrier(0, 2), p_ready_barrier(1, 2),
                                               kBarSplitSoftmaxQ, kBarPartialsWritten}),
              "the fp8 kernels' named barriers (the split-role kernels include the alternating consumers' code)");
static_assert(barrier_ids::valid_and_distinct({kBarSplitSoftmaxQ, kBarFp8QReady, kBarRowStats, kBarPartialsWritten}),
              "the per-block split-role kernel's named barriers");

}  // namespace kbmla::sm90
