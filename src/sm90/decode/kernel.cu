// The sm_90a bf16 MLA decode kernel (d_qk 576 or 512, d_v 512, pages 1..256): entry point and
// launch. d_qk 512 (no rope part), the row gather of pages below 8 tokens and two KV loader
// warps for pages of 8 and 16 tokens (d_qk 576) are their own instantiations, full mode only;
// so are the narrow consumers of tiles of at most 16 rows (consumer_narrow.cuh: d_qk 576,
// TMA pages of 32+ tokens, one loader warp). Roles live in producer.cuh, consumer.cuh and
// consumer_narrow.cuh; see config.hpp for the budgets.
#include "src/sm90/decode/kernel.hpp"

#include <cstdlib>
#include <cstring>

#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/sm90/decode/consumer.cuh"
#include "src/sm90/decode/consumer_narrow.cuh"
#include "src/sm90/decode/producer.cuh"

namespace kbmla::sm90 {

// kTwoLoaders: two KV loader warps (kernel.hpp, two_loader_warps; pages of 8 and 16 tokens).
// kNarrow: the consumers of tiles of at most 16 rows (consumer_narrow.cuh).
template <KernelMode Mode, int QkBoxes, bool kGatherRows, bool kTwoLoaders = false, bool kNarrow = false>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_bf16_kernel(const __grid_constant__ QMaps q_maps, const __grid_constant__ CUtensorMap kv_map,
                           const __grid_constant__ DecodeParams p) {
  if (plan_failed(p)) return;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(&q_maps.latent);
    if constexpr (QkBoxes > kLatentBoxes) cute::prefetch_tma_descriptor(&q_maps.rope);
    cute::prefetch_tma_descriptor(&kv_map);
    if constexpr (kTwoLoaders) {
      // The flags start at 0: the two loader warps each write only their byte.
      for (int s = 0; s < kStages; ++s) reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags)[s] = 0;
    }
    init_pipeline_barriers<kStages>(bars, p.cluster_size, kTwoLoaders ? 2 : 1);
  }
  kernel_prologue_sync(p.cluster_size);
  const int wg = threadIdx.x / 128;
  // The row gather keeps more state in the producer loop than 40 registers hold.
  constexpr int producer_regs = kGatherRows ? kGatherProducerRegs : kProducerRegs;
  constexpr int consumer_regs = kGatherRows ? kGatherConsumerRegs : kConsumerRegs;
  if (wg == 0) {
    set_max_registers_dec<producer_regs>();
    if (kTwoLoaders && (threadIdx.x < 32 || threadIdx.x / 32 == PagedKvLoader<QkBoxes>::kHelperWarp)) {
      PagedKvLoader<QkBoxes> kv{&kv_map, p};
      run_kv_loader<Mode, QkBoxes, kGatherRows, Bf16Smem, true>(p, kv, smem, threadIdx.x < 32 ? 0 : 1);
    } else if (!kTwoLoaders &&
               (threadIdx.x < 32 || (kGatherRows && threadIdx.x / 32 == PagedKvLoader<QkBoxes>::kHelperWarp))) {
      // The row gather: warps 0 and 3 take the blocks in turn (producer.cuh, kGatherWarps),
      // one per stage.
      PagedKvLoader<QkBoxes> kv{&kv_map, p};
      run_kv_loader<Mode, QkBoxes, kGatherRows, Bf16Smem, false, kGatherRows ? 2 : 1>(p, kv, smem,
                                                                                     threadIdx.x < 32 ? 0 : 1);
    } else if (threadIdx.x == 32) {  // Q loader: one thread of warp 1
      run_q_loader<QkBoxes>(p, &q_maps, smem);
    }
  } else if (wg == 1) {
    set_max_registers_inc<consumer_regs>();
    if constexpr (kNarrow) {
      run_consumer_narrow<Mode, QkBoxes, true>(p, smem);
    } else {
      run_consumer<Mode, QkBoxes, true>(p, smem);
    }
  } else {
    set_max_registers_inc<consumer_regs>();
    if constexpr (kNarrow) {
      run_consumer_narrow<Mode, QkBoxes, false>(p, smem);
    } else {
      run_consumer<Mode, QkBoxes, false>(p, smem);
    }
  }
  if (p.cluster_size > 1) cluster_barrier();
}

cudaLaunchConfig_t cluster_config(dim3 grid, int cluster_size, uint32_t smem_bytes, cudaStream_t stream,
                                  cudaLaunchAttribute (&attrs)[2], bool programmatic, int threads) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  attrs[0] = cudaLaunchAttribute{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(cluster_size);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1] = cudaLaunchAttribute{};
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = programmatic ? 2 : 1;
  return config;
}

namespace {
template <KernelMode Mode, int QkBoxes, bool kGatherRows = false, bool kTwoLoaders = false, bool kNarrow = false>
void launch_mode(const QMaps& q_maps, const CUtensorMap& kv_map, const DecodeParams& p, dim3 grid,
                 cudaStream_t stream) {
  constexpr auto kernel = mla_decode_bf16_kernel<Mode, QkBoxes, kGatherRows, kTwoLoaders, kNarrow>;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(SmemLayout::alloc));
  launch_clustered(kernel, SmemLayout::alloc, attr_err, q_maps, kv_map, p, grid, stream, "decode");
}
}  // namespace

bool env_switch_not_never(const char* name) {
  if (const char* e = std::getenv(name)) {
    if (std::strcmp(e, "never") == 0) return false;
    require(std::strcmp(e, "auto") == 0, name, "='", e, "' must be auto or never");
  }
  return true;
}

bool bf16_narrow_enabled() { return env_switch_not_never("KBMLA_BF16_NARROW"); }

int max_active_clusters(int cluster_size) {
  require(cluster_size == 1 || cluster_size == 2, "decode: cluster size (", cluster_size, ") must be 1 or 2");
  constexpr auto kernel = mla_decode_bf16_kernel<KernelMode::kFull, kQkBoxes, false>;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(SmemLayout::alloc));
  require(attr_err == cudaSuccess, "decode: cannot reserve ", SmemLayout::alloc, " bytes of shared memory: ",
          cudaGetErrorString(attr_err));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t config = cluster_config(dim3(unsigned(cluster_size)), cluster_size, SmemLayout::alloc,
                                                   nullptr, attrs, false);
  int clusters = 0;
  const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  require(err == cudaSuccess, "decode: cudaOccupancyMaxActiveClusters failed: ", cudaGetErrorString(err));
  require(clusters > 0, "decode: no ", cluster_size, "-CTA cluster of this kernel fits on the device");
  return clusters;
}

void launch_decode_bf16(const QMaps& q_maps, const CUtensorMap& kv_map, const DecodeParams& p, dim3 grid,
                        cudaStream_t stream, KernelMode mode) {
  const KernelChoice k = choose_bf16_kernel(p, mode);  // (kernel_choice.cpp: the rules)
  const bool no_rope = p.d_qk == kDqkNoRope;
  if (k.gather_rows) {
    return no_rope ? launch_mode<KernelMode::kFull, kDqkNoRope / kBoxCols, true>(q_maps, kv_map, p, grid, stream)
                   : launch_mode<KernelMode::kFull, kQkBoxes, true>(q_maps, kv_map, p, grid, stream);
  }
  if (no_rope) return launch_mode<KernelMode::kFull, kDqkNoRope / kBoxCols>(q_maps, kv_map, p, grid, stream);
  if (k.two_loader_warps) return launch_mode<KernelMode::kFull, kQkBoxes, false, true>(q_maps, kv_map, p, grid, stream);
  if (k.kernel == DecodeKernel::kBf16Narrow) {
    return launch_mode<KernelMode::kFull, kQkBoxes, false, false, true>(q_maps, kv_map, p, grid, stream);
  }
  switch (mode) {
    case KernelMode::kFull: return launch_mode<KernelMode::kFull, kQkBoxes>(q_maps, kv_map, p, grid, stream);
    case KernelMode::kLoadOnly: return launch_mode<KernelMode::kLoadOnly, kQkBoxes>(q_maps, kv_map, p, grid, stream);
    case KernelMode::kMathOnly: return launch_mode<KernelMode::kMathOnly, kQkBoxes>(q_maps, kv_map, p, grid, stream);
  }
}

}  // namespace kbmla::sm90
