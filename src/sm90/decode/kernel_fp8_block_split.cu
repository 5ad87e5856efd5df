// The per-block-scale fp8 kernel for tiles of 17..64 rows (one CTA, or each CTA of a 2-CTA
// cluster's 128-row tile) with a softmax warpgroup and two P V warpgroups
// (consumer_fp8_block_split.cuh); kernel.hpp, fp8_block_split_roles, says which calls
// take it. Q comes by TMA (the quantiser's e4m3 latent part, the bf16 rope), or with
// p.q_inline the P V warpgroups quantise a bf16 Q's latent part at each item's start and
// only the rope comes by TMA (launch_choices.cpp, choose_q_path, says when).
#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/sm90/decode/consumer_fp8_block_split.cuh"
#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/producer.cuh"

namespace kbmla::sm90 {

namespace fp8_block {

// kTwoLoaders: kernel.hpp, two_loader_warps (warp 3 loads the odd parts of pages of 8 and
// 16 tokens). kPvAcc: the P V warpgroups' accumulators per M block (N / 2; 24 and 16 for
// tiles of at most 48 and 32 rows, as in kernel_fp8_split.cu).
template <bool kTwoLoaders, int kPvAcc = 32>
__global__ void __launch_bounds__(fp8::kSplitThreads, 1)
    mla_decode_fp8_block_split_kernel(const __grid_constant__ QMaps q_maps, const __grid_constant__ KvBlockMaps kv_maps,
                                      const __grid_constant__ DecodeParams p) {
  if (plan_failed(p)) return;
  using L = BlockSplitLayout;
  using Smem = Fp8BlockSmem<false>;
  constexpr int kStages = L::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  if (threadIdx.x == 0) {
    if (!p.q_inline) cute::prefetch_tma_descriptor(&q_maps.latent);  // p.q_inline: the P V warpgroups quantise it
    cute::prefetch_tma_descriptor(&q_maps.rope);
    cute::prefetch_tma_descriptor(&kv_maps.data);
    cute::prefetch_tma_descriptor(&kv_maps.scales);
    *reinterpret_cast<uint4*>(smem + L::zero_row) = make_uint4(0, 0, 0, 0);
    for (int s = 0; s < kStages; ++s) Mbarrier::init(bars + 2 + 2 * kStages + s, 1);  // ready: the scale helper
    if constexpr (kTwoLoaders) {
      // The flags start at 0: the two loader warps each write only their byte.
      for (int s = 0; s < kStages; ++s) reinterpret_cast<int32_t*>(smem + L::stage_flags)[s] = 0;
    }
    init_pipeline_barriers<kStages>(bars, p.cluster_size, kTwoLoaders ? 2 : 1);
    // p.q_inline: q_full also waits for the P V warpgroups' quantised latent part.
    if (p.q_inline) Mbarrier::init(bars + 0, 2);
    fp8::init_split_barriers<kStages>(smem + L::split_barriers, bars);
  }
  kernel_prologue_sync(p.cluster_size);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    set_max_registers_dec<kBlockSplitProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (kTwoLoaders && (warp == 0 || warp == PagedKvLoader<kQkBoxes, Smem>::kHelperWarp)) {
      PagedKvLoader<kQkBoxes, Smem> kv{&kv_maps, p};
      run_kv_loader<KernelMode::kFull, kQkBoxes, false, Smem, true>(p, kv, smem, warp == 0 ? 0 : 1);
    } else if (!kTwoLoaders && warp == 0) {
      PagedKvLoader<kQkBoxes, Smem> kv{&kv_maps, p};
      run_kv_loader<KernelMode::kFull, kQkBoxes, false, Smem>(p, kv, smem);
    } else if (threadIdx.x == 32) {  // Q loader
      grid_dependency_wait();          // the quantised Q
      run_q_loader<kQkBoxes, Smem, /*kCheckDcp=*/true>(p, &q_maps, smem);
    } else if (warp == 2) {
      run_scale_helper<false>(p, smem);
    }
  } else if (wg == 1) {
    set_max_registers_dec<kBlockSplitSoftmaxRegs>();
    grid_dependency_wait();  // the Q scales
    run_block_split_softmax(p, smem);
  } else {
    set_max_registers_inc<kBlockSplitPvRegs>();
    run_block_split_pv<kPvAcc>(p, smem, wg - 2);
  }
  // A 2-CTA cluster's stages are filled by both CTAs (multicast, kernel_fp8_split.cu).
  if (p.cluster_size > 1) cluster_barrier();
}

}  // namespace fp8_block

bool fp8_block_split_kernel_wanted(const DecodeParams& p) {
  return fp8_block_split_roles(p) && split_roles_enabled();
}

namespace {
template <bool kTwoLoaders, int kPvAcc = 32>
void launch_block_split(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                        cudaStream_t stream, bool after_quantiser) {
  constexpr auto kernel = fp8_block::mla_decode_fp8_block_split_kernel<kTwoLoaders, kPvAcc>;
  constexpr uint32_t smem_bytes = fp8_block::BlockSplitLayout::alloc;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(smem_bytes));
  launch_clustered(kernel, smem_bytes, attr_err, q_maps, kv_maps, p, grid, stream, "decode (fp8 per-block split)",
                   /*programmatic=*/after_quantiser, fp8::kSplitThreads);
}
}  // namespace

void launch_decode_fp8_block_split(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                                   cudaStream_t stream, bool after_quantiser) {
  // P V over the tile's rows (kernel.hpp, with_split_pv_acc), with one or two loader warps.
  with_split_pv_acc(split_cta_rows(p), [&](auto acc) {
    if (two_loader_warps(p)) {
      return launch_block_split<true, acc()>(q_maps, kv_maps, p, grid, stream, after_quantiser);
    }
    launch_block_split<false, acc()>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  });
}

}  // namespace kbmla::sm90
