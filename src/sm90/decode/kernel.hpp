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

void launch_decode_bf16(const CUtensorMap& q_map, const CUtensorMap& kv_map, const DecodeParams& p, dim3 grid,
                        cudaStream_t stream, KernelMode mode = KernelMode::kFull);

}  // namespace kbmla::sm90
