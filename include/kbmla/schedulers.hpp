// Tile schedulers of the seed, host/device. A work tile is the coordinate
// (CTA within the cluster, q tile, batch, KV split). Kernels construct one scheduler per
// CTA and loop `for (w = s.initial_work(); w.valid; s.advance(); w = s.current_work())`.
#pragma once

#include <cstdint>

#include "kbmla/fast_divmod.hpp"
#include "kbmla/hd.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {

struct WorkTileInfo {
  int cta_in_cluster;
  int q_tile;
  int batch;
  int split;
  bool valid;
};

struct GridShape {
  int x, y, z;
};

// Seed: MLAStaticTileSchedulerParams. Divisors are prepared once on the host.
struct StaticTileSchedulerParams {
  bool is_persistent = false;
  int problem_b = 1;   // batch size B
  int problem_s = 1;   // q tiles per request
  int cluster_m = 1;   // cluster_shape_mnk[0]; the cluster's other extents are 1
  int split_kv = 1;    // uniform KV splits per request
  FastDivmod b_fdd{1};
  FastDivmod s_fdd{1};
  FastDivmod split_fdd{1};
  // cluster x S x B x splits, the persistent walk's end, made once here: a kernel parameter
  // costs the device no register to keep (the producer's 40 spilled the product).
  int num_tiles = 1;

  StaticTileSchedulerParams() = default;
  KBMLA_HD StaticTileSchedulerParams(bool persistent, int b, int s, int cluster, int splits)
      : is_persistent(persistent), problem_b(b), problem_s(s), cluster_m(cluster), split_kv(splits),
        b_fdd(b), s_fdd(s), split_fdd(splits), num_tiles(cluster * s * b * splits) {}
};

// Seed: MLAStaticTileScheduler.
//  - Non-persistent: grid (cluster, B * S, split_kv); block (x, y, z) does the single tile
//    (x, y / B, y % B, z) and exits.
//  - Persistent: grid min(max_active_clusters * cluster, all tiles); CTA i takes linear
//    tile i, then i + grid, ...; linear index decodes with the cluster CTA fastest, then
//    q tile, batch, split.
class StaticTileScheduler {
 public:
  KBMLA_HD StaticTileScheduler(const StaticTileSchedulerParams& params, int current_work_linear_idx,
                               int block_x, int block_y, int block_z, int grid_size, bool is_valid = true)
      : params_(params), linear_idx_(current_work_linear_idx), block_{block_x, block_y, block_z},
        num_persistent_ctas_(grid_size), num_blocks_(params.num_tiles), valid_(is_valid) {}

  KBMLA_HD static GridShape grid_shape(const StaticTileSchedulerParams& params, int max_active_clusters) {
    GridShape full{params.cluster_m, params.problem_b * params.problem_s, params.split_kv};
    if (!params.is_persistent) return full;
    long long all = static_cast<long long>(full.x) * full.y * full.z;
    long long active = static_cast<long long>(max_active_clusters) * params.cluster_m;
    return {static_cast<int>(active < all ? active : all), 1, 1};
  }

  KBMLA_HD WorkTileInfo current_work() const {
    if (params_.is_persistent) {
      int cta, s_idx, b_idx, split_idx;
      int cluster_linear = linear_idx_ / params_.cluster_m;
      cta = linear_idx_ - cluster_linear * params_.cluster_m;
      int sb = params_.s_fdd.divmod(cluster_linear, s_idx);
      int bsplit = params_.b_fdd.divmod(sb, b_idx);
      params_.split_fdd.divmod(bsplit, split_idx);
      return {cta, s_idx, b_idx, split_idx, linear_idx_ < num_blocks_};
    }
    int b_idx;
    int s_idx = params_.b_fdd.divmod(block_[1], b_idx);
    return {block_[0], s_idx, b_idx, block_[2], valid_};
  }

  KBMLA_HD WorkTileInfo initial_work() const { return current_work(); }

  KBMLA_HD void advance(int count = 1) {
    if (params_.is_persistent) {
      linear_idx_ += count * num_persistent_ctas_;
    } else {
      valid_ = false;
    }
  }

  KBMLA_HD int num_blocks() const { return num_blocks_; }

 private:
  StaticTileSchedulerParams params_;
  int linear_idx_;
  int block_[3];
  int num_persistent_ctas_;
  int num_blocks_;
  bool valid_;
};

// Seed: MLAWorkListTileScheduler. CTA i reads entry i / cluster, then every grid / cluster
// further, and stops at the first negative entry (see work_format.hpp for the entry).
class WorkListTileScheduler {
 public:
  KBMLA_HD WorkListTileScheduler(const StaticTileSchedulerParams& params, const int32_t* work_list,
                                 int current_work_linear_idx, int num_ctas)
      : params_(params), work_list_(work_list), linear_idx_(current_work_linear_idx), num_ctas_(num_ctas) {}

  KBMLA_HD WorkTileInfo current_work() const {
    int cluster = linear_idx_ / params_.cluster_m;
    int cta = linear_idx_ - cluster * params_.cluster_m;
    int32_t entry = work_list_[cluster];
    int32_t packed = entry > 0 ? entry : 0;
    int b_idx;
    int s_idx = params_.b_fdd.divmod(work_entry_tile_batch(packed), b_idx);
    return {cta, s_idx, b_idx, work_entry_split(packed), entry >= 0};
  }

  KBMLA_HD WorkTileInfo initial_work() const { return current_work(); }

  KBMLA_HD void advance(int count = 1) { linear_idx_ += count * num_ctas_; }

 private:
  StaticTileSchedulerParams params_;
  const int32_t* work_list_;
  int linear_idx_;
  int num_ctas_;
};

}  // namespace kbmla
