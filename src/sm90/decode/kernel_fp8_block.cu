// The sm_90a decode over the fp8 cache with per-block scales (656-byte tokens): entry
// point and launch. Pages of 2..256 tokens through TMA, one-token pages by the cp.async
// row gather. See config_fp8_block.hpp.
#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/sm90/decode/consumer_fp8_block.cuh"
#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/producer.cuh"

namespace kbmla::sm90 {

namespace fp8_block {

// kAcc 8: at most 16 query rows (P V with N = 16); 32: N = 64. kTwoLoaders: kernel.hpp,
// two_loader_warps.
template <int kAcc, bool kTwoLoaders>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_fp8_block_kernel(const __grid_constant__ QMaps q_maps, const __grid_constant__ KvBlockMaps kv_maps,
                                const __grid_constant__ DecodeParams p) {
  if (plan_failed(p)) return;
  constexpr bool kNarrow = kAcc == 8;
  using SmemLayout = SmemLayoutT<kNarrow>;
  using Smem = Fp8BlockSmem<kNarrow>;
  constexpr int kStages = SmemLayout::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  if (threadIdx.x == 0) {
    if (!p.q_inline) cute::prefetch_tma_descriptor(&q_maps.latent);  // p.q_inline: the consumers quantise it
    cute::prefetch_tma_descriptor(&q_maps.rope);
    cute::prefetch_tma_descriptor(&kv_maps.data);
    cute::prefetch_tma_descriptor(&kv_maps.scales);
    *reinterpret_cast<uint4*>(smem + SmemLayout::zero_row) = make_uint4(0, 0, 0, 0);
    for (int s = 0; s < kStages; ++s) Mbarrier::init(bars + 2 + 2 * kStages + s, 1);  // ready: the scale helper
    if constexpr (kTwoLoaders) {
      // The flags start at 0: the two loader warps each write only their byte.
      for (int s = 0; s < kStages; ++s) reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags)[s] = 0;
    }
    init_pipeline_barriers<kStages>(bars, p.cluster_size, kTwoLoaders ? 2 : 1);
  }
  kernel_prologue_sync(p.cluster_size);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    set_max_registers_dec<kProducerRegs<kAcc>>();
    const int warp = threadIdx.x / 32;
    if (kTwoLoaders && (warp == 0 || warp == PagedKvLoader<kQkBoxes, Smem>::kHelperWarp)) {
      // One call site for both loader warps (kernel_fp8.cu).
      PagedKvLoader<kQkBoxes, Smem> kv{&kv_maps, p};
      run_kv_loader<KernelMode::kFull, kQkBoxes, false, Smem, true>(p, kv, smem, warp == 0 ? 0 : 1);
    } else if (!kTwoLoaders && (warp == 0 || (p.gather_rows && warp == 3))) {
      PagedKvLoader<kQkBoxes, Smem> kv{&kv_maps, p};
      // The row gather: warps 0 and 3 in turn (warp 2 is the scale helper; producer.cuh,
      // kGatherWarps).
      if (p.gather_rows) {
        run_kv_loader<KernelMode::kFull, kQkBoxes, true, Smem, false, 2>(p, kv, smem, warp == 0 ? 0 : 1);
      } else {
        run_kv_loader<KernelMode::kFull, kQkBoxes, false, Smem>(p, kv, smem);
      }
    } else if (threadIdx.x == 32) {  // Q loader (p.q_inline: the rope part only)
      grid_dependency_wait();          // the quantised Q
      run_q_loader<kQkBoxes, Smem, /*kCheckDcp=*/true>(p, &q_maps, smem);
    } else if (warp == 2) {
      run_scale_helper<kNarrow>(p, smem);
    }
  } else {
    // One call site for both consumers (wg 1, 2): one copy of their code, which both run
    // at once (two inlined copies made the kernel's hot code twice the size; ncu: 10 %
    // of the samples were instruction-fetch stalls).
    set_max_registers_inc<kConsumerRegs<kAcc>>();
    grid_dependency_wait();  // the Q scales
    run_consumer_fp8_block<kAcc>(p, smem, wg - 1);
  }
  if (p.cluster_size > 1) cluster_barrier();
}

}  // namespace fp8_block

static_assert(fp8_block::SmemLayoutT<true>::kQRows == kFp8BlockNarrowQRows,
              "the host encodes the Q boxes the narrow kernel's tile has");

namespace {
template <int kAcc, bool kTwoLoaders>
void launch_block(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                  cudaStream_t stream, bool after_quantiser) {
  constexpr auto kernel = fp8_block::mla_decode_fp8_block_kernel<kAcc, kTwoLoaders>;
  constexpr uint32_t smem_bytes = fp8_block::SmemLayoutT<kAcc == 8>::alloc;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(smem_bytes));
  // After the Q quantiser, its programmatic dependent (kernel_fp8.cu says why).
  launch_clustered(kernel, smem_bytes, attr_err, q_maps, kv_maps, p, grid, stream, "decode (fp8 per-block)",
                   /*programmatic=*/after_quantiser);
}
}  // namespace

void launch_decode_fp8_block(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                             cudaStream_t stream, bool after_quantiser) {
  const KernelChoice k = choose_fp8_block_kernel(p);  // (kernel_choice.cpp: the rules)
  if (k.kernel == DecodeKernel::kFp8BlockSplit) {
    return launch_decode_fp8_block_split(q_maps, kv_maps, p, grid, stream, after_quantiser);
  }
  // q_maps.latent / .rope have 16-row boxes for the narrow kernel (fp8_block_narrow).
  const bool narrow = k.kernel == DecodeKernel::kFp8BlockNarrow;
  if (k.two_loader_warps) {
    return narrow ? launch_block<8, true>(q_maps, kv_maps, p, grid, stream, after_quantiser)
                  : launch_block<32, true>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  }
  if (narrow) return launch_block<8, false>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  launch_block<32, false>(q_maps, kv_maps, p, grid, stream, after_quantiser);
}

}  // namespace kbmla::sm90
