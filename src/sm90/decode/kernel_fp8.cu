// The sm_90a fp8 (e4m3, per-tensor scale) MLA decode kernel: entry point and launch.
// Full mode only; pages of 2..256 tokens through TMA, one-token pages by a cp.async row
// gather. See config_fp8.hpp.
#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/sm90/decode/consumer_fp8.cuh"
#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/producer.cuh"

namespace kbmla::sm90 {

namespace fp8 {

// Ceiling spikes only (bench/NOTES.md): -DKBMLA_FP8_EXPERIMENT_MODE=1 streams the stages
// without math, =2 runs the math on whatever the stages hold; results are wrong then.
#ifndef KBMLA_FP8_EXPERIMENT_MODE
#define KBMLA_FP8_EXPERIMENT_MODE 0
#endif
constexpr KernelMode kMode = static_cast<KernelMode>(KBMLA_FP8_EXPERIMENT_MODE);

// kAcc: O^T accumulators per M block and thread, 8 (at most 16 query rows: P V with N = 16)
// or 32 (N = 64); consumer_fp8.cuh.
// kTwoCopies: each consumer warpgroup runs its own inlined copy of the consumer code, its
// index a constant, instead of one copy for both. One copy measured faster (fewer
// instruction-fetch stalls) for tiles of up to 64 rows (lognormal_H16_Sq4 266 -> 250 us,
// B4_Sq4 144 -> 128) but slower for the compute-bound 2-CTA cluster tiles (H128_L8192 180
// -> 200 us, q_len 16 175 -> 191: the index in a register costs the wide consumer its last
// registers, 28-36 bytes of spills); the clusters keep two copies (d_qk 576 only: d_qk 512
// runs one, to keep the instantiations few).
// kTwoLoaders: kernel.hpp, two_loader_warps.
template <int QkBoxes, int kAcc, bool kTwoCopies, bool kTwoLoaders>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_fp8_kernel(const __grid_constant__ QMaps q_maps, const __grid_constant__ KvFp8Maps kv_maps,
                          const __grid_constant__ DecodeParams p) {
  if (plan_failed(p)) return;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  if (threadIdx.x == 0) {
    // With p.q_inline the Q maps are unset: the consumers quantise Q from global memory.
    if (!p.q_inline) cute::prefetch_tma_descriptor(&q_maps.latent);
    cute::prefetch_tma_descriptor(&kv_maps.latent);
    if constexpr (QkBoxes > kLatentBoxes) {
      if (!p.q_inline) cute::prefetch_tma_descriptor(&q_maps.rope);
      cute::prefetch_tma_descriptor(&kv_maps.rope);
    }
    *reinterpret_cast<uint4*>(smem + SmemLayout::zero_row) = make_uint4(0, 0, 0, 0);
    if constexpr (kTwoLoaders) {
      // The flags start at 0: the two loader warps each write only their byte.
      for (int s = 0; s < kStages; ++s) reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags)[s] = 0;
    }
    init_pipeline_barriers<kStages>(bars, p.cluster_size, kTwoLoaders ? 2 : 1);
  }
  kernel_prologue_sync(p.cluster_size);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    set_max_registers_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (kTwoLoaders && (warp == 0 || warp == PagedKvLoader<QkBoxes, Fp8Smem>::kHelperWarp)) {
      // One call site for both loader warps (two inlined copies spilled in the producer).
      PagedKvLoader<QkBoxes, Fp8Smem> kv{&kv_maps, p};
      run_kv_loader<kMode, QkBoxes, false, Fp8Smem, true>(p, kv, smem, warp == 0 ? 0 : 1);
    } else if (!kTwoLoaders && (warp == 0 || (p.gather_rows && warp >= 2))) {
      PagedKvLoader<QkBoxes, Fp8Smem> kv{&kv_maps, p};
      // Pages below 8 tokens are gathered with cp.async (decode_api.cpp, gather_rows), by
      // warps 0, 2 and 3 in turn (producer.cuh, kGatherWarps).
      if (p.gather_rows) {
        run_kv_loader<kMode, QkBoxes, true, Fp8Smem, false, 3>(p, kv, smem, warp == 0 ? 0 : warp - 1);
      } else {
        run_kv_loader<kMode, QkBoxes, false, Fp8Smem>(p, kv, smem);
      }
    } else if (threadIdx.x == 32) {  // Q loader: one thread of warp 1 (p.q_inline: checks only)
      grid_dependency_wait();  // the quantised Q
      run_q_loader<QkBoxes, Fp8Smem, /*kCheckDcp=*/true>(p, &q_maps, smem);
    }
  } else if (kTwoCopies) {
    // Each consumer its own copy (the setmaxnreg in each branch, as ptxas allocates per
    // region: one setmaxnreg before both copies spilled 192 bytes).
    if (wg == 1) {
      set_max_registers_inc<kConsumerRegs>();
      grid_dependency_wait();  // the Q scales
      run_consumer_fp8<kMode, QkBoxes, kAcc, 0>(p, smem, 0);
    } else {
      set_max_registers_inc<kConsumerRegs>();
      grid_dependency_wait();
      run_consumer_fp8<kMode, QkBoxes, kAcc, 1>(p, smem, 1);
    }
  } else {
    // One call site for both consumers (wg 1, 2): one copy of their code, which both run
    // at once (two inlined copies made the kernel's hot code twice the size; ncu: 10 %
    // of the samples were instruction-fetch stalls).
    set_max_registers_inc<kConsumerRegs>();
    grid_dependency_wait();  // the Q scales
    run_consumer_fp8<kMode, QkBoxes, kAcc>(p, smem, wg - 1);
  }
  if (p.cluster_size > 1) cluster_barrier();
}

template <int QkBoxes, int kAcc, bool kTwoCopies = false, bool kTwoLoaders = false>
void launch(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid, cudaStream_t stream,
            bool after_quantiser) {
  constexpr auto kernel = mla_decode_fp8_kernel<QkBoxes, kAcc, kTwoCopies, kTwoLoaders>;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(SmemLayout::alloc));
  // After the Q quantiser, a programmatic dependent of it: the KV stream starts while Q
  // is quantised. Not after a caller's kernel, which may still be writing the cache.
  launch_clustered(kernel, SmemLayout::alloc, attr_err, q_maps, kv_maps, p, grid, stream, "decode (fp8)",
                   /*programmatic=*/after_quantiser);
}

}  // namespace fp8

void launch_decode_fp8(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid,
                       cudaStream_t stream, bool after_quantiser) {
  const KernelChoice k = choose_fp8_kernel(p);  // (kernel_choice.cpp: the rules)
  // (The host's choice of the staged Q and the kernel's choice here read the same
  // predicate: launch_choices.cpp, per_tensor_split_kernel.)
  require(k.kernel == DecodeKernel::kFp8Split || !p.q_staged, "decode (fp8): internal error: a staged Q (", p.rows,
          " rows) for a kernel other than the split-role one");
  if (k.kernel == DecodeKernel::kFp8Split) return launch_decode_fp8_split(q_maps, kv_maps, p, grid, stream, after_quantiser);
  // At most 16 query rows in the (one-CTA) tile: P V with N = 16.
  const bool narrow = k.kernel == DecodeKernel::kFp8Narrow;
  if (p.d_qk == kDqkNoRope) {
    return narrow ? fp8::launch<kDqkNoRope / kBoxCols, 8>(q_maps, kv_maps, p, grid, stream, after_quantiser)
                  : fp8::launch<kDqkNoRope / kBoxCols, 32>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  }
  if (k.two_loader_warps) {
    return narrow ? fp8::launch<kQkBoxes, 8, false, true>(q_maps, kv_maps, p, grid, stream, after_quantiser)
                  : fp8::launch<kQkBoxes, 32, false, true>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  }
  if (narrow) return fp8::launch<kQkBoxes, 8>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  if (k.cluster_copies) return fp8::launch<kQkBoxes, 32, true>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  fp8::launch<kQkBoxes, 32>(q_maps, kv_maps, p, grid, stream, after_quantiser);
}

}  // namespace kbmla::sm90
