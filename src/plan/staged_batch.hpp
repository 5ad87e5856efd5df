// A batch staged for the slot walk on the host (slot_walk.hpp): each request's fill terms
// and the batch's exclusive prefix sums (B + 1 entries), as the device planner stages them
// in shared memory. The host planner's walk and the CPU tests build it here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "src/plan/slot_walk.hpp"

namespace kbmla::plan_detail {

struct StagedBatch {
  std::vector<RequestTerms> terms;
  std::vector<int64_t> whole, tile_cost;
  std::vector<int32_t> tiles, work, zero;  // zero: zero-fill entries before each request
  int64_t max_tile_cost = 0;               // the whole form's largest unit
  bool all_visible = true;                 // no request with work has first_tile > 0
  int bad_index = -1;                      // the first negative seqlen (then nothing is staged)

  StagedBatch(const PlanShape& p, std::span<const int32_t> seqlens, int num_tiles) {
    const int B = p.batch;
    for (int b = 0; b < B; ++b) {
      if (seqlens[b] < 0) {
        bad_index = b;
        return;
      }
    }
    terms.resize(B);
    whole.assign(B + 1, 0);
    tile_cost.assign(B + 1, 0);
    tiles.assign(B + 1, 0);
    work.assign(B + 1, 0);
    zero.assign(B + 1, 0);
    PrefixParts at;
    for (int b = 0; b < B; ++b) {
      const RequestTerms t = request_terms(p, seqlens[b], num_tiles, /*staged=*/true);
      const bool w = has_work(t.r);
      terms[b] = t;
      at.add(PrefixParts::of(t, num_tiles));
      whole[b + 1] = at.whole;
      tile_cost[b + 1] = at.tile_cost;
      tiles[b + 1] = at.tiles;
      work[b + 1] = at.work;
      zero[b + 1] = at.zero;
      if (w) max_tile_cost = std::max(max_tile_cost, t.tile_cost);
      if (w && t.r.first_tile > 0) all_visible = false;
    }
  }
  BatchPrefix prefix() const { return {whole.data(), tile_cost.data(), tiles.data(), work.data()}; }
  StagedRequests requests(std::span<const int32_t> seqlens) const { return {seqlens.data(), terms.data()}; }
};

}  // namespace kbmla::plan_detail
