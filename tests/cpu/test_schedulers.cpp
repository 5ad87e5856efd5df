// The seed's schedulers on the host: grid shapes, tile decoding, and the walks.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "kbmla/schedulers.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {
namespace {

using Coord = std::tuple<int, int, int, int>;  // (cta in cluster, q tile, batch, split)

TEST(StaticScheduler, GridShapes) {
  StaticTileSchedulerParams np(false, 5, 3, 2, 4);
  GridShape g = StaticTileScheduler::grid_shape(np, 10);
  EXPECT_EQ(g.x, 2);
  EXPECT_EQ(g.y, 15);
  EXPECT_EQ(g.z, 4);
  StaticTileSchedulerParams p(true, 5, 3, 2, 4);  // 120 tiles
  g = StaticTileScheduler::grid_shape(p, 10);
  EXPECT_EQ(g.x, 20);
  EXPECT_EQ(g.y * g.z, 1);
  g = StaticTileScheduler::grid_shape(p, 1000);
  EXPECT_EQ(g.x, 120);  // never more CTAs than tiles
}

TEST(StaticScheduler, PersistentWalkVisitsEveryCoordinateOnceForAnyGrid) {
  for (int cluster : {1, 2}) {
    for (auto [B, S, splits] : {std::tuple{3, 2, 5}, {1, 1, 1}, {7, 3, 1}, {4, 1, 9}}) {
      StaticTileSchedulerParams p(true, B, S, cluster, splits);
      const int total = cluster * B * S * splits;
      const int total_clusters = total / cluster;
      // Grids smaller than, equal to and larger than the work.
      for (int active_clusters : {1, 2, total_clusters - 1, total_clusters, total_clusters + 5}) {
        if (active_clusters < 1) continue;
        GridShape g = StaticTileScheduler::grid_shape(p, active_clusters);
        std::set<Coord> seen;
        int visits = 0;
        for (int cta = 0; cta < g.x; ++cta) {
          StaticTileScheduler s(p, cta, 0, 0, 0, g.x);
          for (WorkTileInfo w = s.initial_work(); w.valid; s.advance(), w = s.current_work()) {
            EXPECT_EQ(w.cta_in_cluster, cta % cluster);
            seen.insert({w.cta_in_cluster, w.q_tile, w.batch, w.split});
            ++visits;
          }
        }
        EXPECT_EQ(visits, total) << "grid " << g.x;
        EXPECT_EQ(int(seen.size()), total) << "grid " << g.x;
        for (const auto& [c, s, b, k] : seen) {
          EXPECT_TRUE(c < cluster && s < S && b < B && k < splits);
        }
      }
    }
  }
}

TEST(StaticScheduler, PersistentDecodeOrderIsClusterThenTileThenBatchThenSplit) {
  StaticTileSchedulerParams p(true, 3, 2, 2, 4);
  // linear = ((split * B + b) * S + s) * cluster + cta
  StaticTileScheduler s(p, ((2 * 3 + 1) * 2 + 1) * 2 + 1, 0, 0, 0, 1);
  WorkTileInfo w = s.current_work();
  EXPECT_EQ(w.cta_in_cluster, 1);
  EXPECT_EQ(w.q_tile, 1);
  EXPECT_EQ(w.batch, 1);
  EXPECT_EQ(w.split, 2);
  EXPECT_TRUE(w.valid);
  StaticTileScheduler past(p, 48, 0, 0, 0, 1);
  EXPECT_FALSE(past.current_work().valid);
}

TEST(StaticScheduler, NonPersistentOneTilePerBlock) {
  StaticTileSchedulerParams p(false, 5, 3, 2, 4);
  GridShape g = StaticTileScheduler::grid_shape(p, 1);
  std::set<Coord> seen;
  for (int z = 0; z < g.z; ++z)
    for (int y = 0; y < g.y; ++y)
      for (int x = 0; x < g.x; ++x) {
        StaticTileScheduler s(p, 0, x, y, z, 1);
        WorkTileInfo w = s.initial_work();
        ASSERT_TRUE(w.valid);
        EXPECT_EQ(w.q_tile, y / 5);
        EXPECT_EQ(w.batch, y % 5);
        seen.insert({w.cta_in_cluster, w.q_tile, w.batch, w.split});
        s.advance();
        EXPECT_FALSE(s.current_work().valid);
      }
  EXPECT_EQ(seen.size(), size_t(2 * 5 * 3 * 4));
}

TEST(WorkEntry, EncodingRoundTripsAndStaysNonNegative) {
  for (int B : {1, 7, 1024}) {
    for (int t : {0, 1, 5}) {
      for (int b : {0, B - 1}) {
        for (int s : {0, 1, 255}) {
          int32_t e = make_work_entry(t, b, B, s);
          EXPECT_GE(e, 0);
          EXPECT_EQ(work_entry_tile_batch(e), t * B + b);
          EXPECT_EQ(work_entry_split(e), s);
        }
      }
    }
  }
  EXPECT_GE(make_work_entry(0, kMaxTileBatchIndex - 1, kMaxTileBatchIndex, 255), 0);
}

TEST(WorkListScheduler, DecodesEntriesAndWalksWithStrideGridOverCluster) {
  // 2 cluster slots, cluster of 2 => 4 CTAs. Slot 0: two items, slot 1: one item.
  const int B = 3;
  std::vector<int32_t> list = {make_work_entry(1, 2, B, 7), make_work_entry(0, 0, B, 0),
                               make_work_entry(0, 1, B, 255), kNoWork,
                               kNoWork, kNoWork};
  StaticTileSchedulerParams p(true, B, 2, 2, 1);
  std::vector<std::vector<Coord>> walked(4);
  for (int cta = 0; cta < 4; ++cta) {
    WorkListTileScheduler s(p, list.data(), cta, 4);
    for (WorkTileInfo w = s.initial_work(); w.valid; s.advance(), w = s.current_work()) {
      walked[cta].push_back({w.cta_in_cluster, w.q_tile, w.batch, w.split});
    }
  }
  EXPECT_EQ(walked[0], (std::vector<Coord>{{0, 1, 2, 7}, {0, 0, 1, 255}}));
  EXPECT_EQ(walked[1], (std::vector<Coord>{{1, 1, 2, 7}, {1, 0, 1, 255}}));
  EXPECT_EQ(walked[2], (std::vector<Coord>{{0, 0, 0, 0}}));
  EXPECT_EQ(walked[3], (std::vector<Coord>{{1, 0, 0, 0}}));
}

TEST(WorkListScheduler, NegativeEntryIsInvalidAndDecodesAsZero) {
  std::vector<int32_t> list = {kNoWork, -12345};
  StaticTileSchedulerParams p(true, 4, 1, 1, 1);
  for (int cta : {0, 1}) {
    WorkTileInfo w = WorkListTileScheduler(p, list.data(), cta, 2).initial_work();
    EXPECT_FALSE(w.valid);
    EXPECT_EQ(w.batch, 0);
    EXPECT_EQ(w.q_tile, 0);
    EXPECT_EQ(w.split, 0);
  }
}

}  // namespace
}  // namespace kbmla
