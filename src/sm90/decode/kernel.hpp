// Launch of the sm_90a bf16 decode kernel (host side).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "src/sm90/decode/params.hpp"

namespace kbmla::sm90 {

// Grid: work list and static persistent (n, 1, 1); static non-persistent
// (cluster, B * q tiles, split_kv). Throws kbmla::Error on a launch failure.
// Clusters of `cluster_size` CTAs of the decode kernel the current device runs at once
// (cudaOccupancyMaxActiveClusters): the persistent grid's size in clusters.
int max_active_clusters(int cluster_size);

// Q's TMA maps: the latent columns (q, or q_nope when Q comes in two tensors) and the rope
// columns (q_pe, or q itself read from column 512; unused for d_qk 512).
struct QMaps {
  CUtensorMap latent;
  CUtensorMap rope;
};

void launch_decode_bf16(const QMaps& q_maps, const CUtensorMap& kv_map, const DecodeParams& p, dim3 grid,
                        cudaStream_t stream, KernelMode mode = KernelMode::kFull);

}  // namespace kbmla::sm90
