// The per-tensor fp8 kernel for tiles of 17..64 rows (one CTA, or each CTA of a 2-CTA
// cluster's 128-row tile, the KV multicast to both) with a softmax warpgroup and two P V
// warpgroups (consumer_fp8_split.cuh), d_qk 576 and 512; kernel.hpp, fp8_split_roles, says
// which calls take it. Q comes by TMA (the quantiser's or the caller's e4m3 Q) or, with
// p.q_staged, as bf16 rows by TMA that the softmax warpgroup quantises (q_staged_fp8.cuh).
#include "kbmla/error.hpp"
#include "src/common/per_device.hpp"
#include "src/sm90/decode/consumer_fp8_split.cuh"
#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/producer.cuh"

namespace kbmla::sm90 {

namespace fp8 {

// The producer's view of this kernel's shared memory: the per-tensor stages (parts of
// pages, 128-byte latent boxes) in a ring of kSplitStages.
// With a staged Q (p.q_staged) the KV loader issues an item's first kQGateBlocks blocks,
// then waits until the Q loader has issued the item's second staged half. Why (bench/NOTES.md
// v37, item phases): that half is asked for only once the softmax warpgroup quantised the
// first, and at a CTA's start it queued behind four KV stages (~150 KB at an SM's ~30 GB/s
// share of HBM): 6-7 us from an item's start to its quantised Q in every 64-row case,
// where a caller's e4m3 Q (one load ahead of the item) made the calls 4-8 % faster.
// Measured, three alternated rounds: B128_Sq4 98.0 -> 94.8 us, B128_H64 96.8 -> 94.6 (the
// one-item plans), the multi-item cases level (-0.7..+0.3 %: their later items' Q phase
// has another cause, not found yet); gating after 2 blocks instead of 1 was no better.
// The producer's spills grew from 36 / 28 to 68 / 56 bytes (d_qk 576, one loader warp).
#ifndef KBMLA_Q_GATE_BLOCKS
#define KBMLA_Q_GATE_BLOCKS 1
#endif
struct Fp8SplitSmem : Fp8Smem {
  using Layout = SplitSmemLayout;
  static constexpr int kStages = kSplitStages;
  static constexpr int kQGateBlocks = KBMLA_Q_GATE_BLOCKS;
  __device__ static uint64_t* q_issued(uint8_t* smem) { return reinterpret_cast<uint64_t*>(smem + Layout::q_issued); }
};

// Ceiling spikes only (bench/NOTES.md), as in kernel_fp8.cu: -DKBMLA_FP8_EXPERIMENT_MODE=1
// streams the stages without math, =2 runs the math on whatever the stages hold.
#ifndef KBMLA_FP8_EXPERIMENT_MODE
#define KBMLA_FP8_EXPERIMENT_MODE 0
#endif
constexpr KernelMode kSplitMode = static_cast<KernelMode>(KBMLA_FP8_EXPERIMENT_MODE);

// QkBoxes: 9 (d_qk 576) or 8 (512; P still goes to the stage's rope box, which then holds
// nothing else). kTwoLoaders: kernel.hpp, two_loader_warps (warp 3 loads the odd parts).
// kPvAcc: the P V warpgroups' accumulators per M block, N / 2 for a P V product over N = 64,
// 48 or 32 rows (run_split_pv). A kernel of its own per N: one kernel holding the three
// P V loops behind a branch spilled in its P V loop and ran 1-6 % slower (bench/NOTES.md v35).
template <int QkBoxes, bool kTwoLoaders, int kPvAcc = 32>
__global__ void __launch_bounds__(kSplitThreads, 1)
    mla_decode_fp8_split_kernel(const __grid_constant__ QMaps q_maps, const __grid_constant__ KvFp8Maps kv_maps,
                                const __grid_constant__ DecodeParams p) {
  if (plan_failed(p)) return;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  using L = SplitSmemLayout;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  uint64_t* staging_full = reinterpret_cast<uint64_t*>(smem + L::staging_barriers);
  if (threadIdx.x == 0) {
    // (With d_qk 512 the rope maps are unset.)
    cute::prefetch_tma_descriptor(&q_maps.latent);
    cute::prefetch_tma_descriptor(&kv_maps.latent);
    if constexpr (QkBoxes > kLatentBoxes) {
      cute::prefetch_tma_descriptor(&q_maps.rope);
      cute::prefetch_tma_descriptor(&kv_maps.rope);
    }
    *reinterpret_cast<uint4*>(smem + L::zero_row) = make_uint4(0, 0, 0, 0);
    if constexpr (kTwoLoaders) {
      // The flags start at 0: the two loader warps each write only their byte.
      for (int s = 0; s < kSplitStages; ++s) reinterpret_cast<int32_t*>(smem + L::stage_flags)[s] = 0;
    }
    Mbarrier::init(staging_full, 1);        // the Q loader's arrive_and_expect_tx
    Mbarrier::init(staging_full + 1, 128);  // staging_empty: the softmax warpgroup
    Mbarrier::init(Fp8SplitSmem::q_issued(smem), 1);  // q_issued[2]: the Q loader
    Mbarrier::init(Fp8SplitSmem::q_issued(smem) + 1, 1);
    init_pipeline_barriers<kSplitStages>(bars, p.cluster_size, kTwoLoaders ? 2 : 1);
    init_split_barriers<kSplitStages>(smem + L::split_barriers, bars);
  }
  kernel_prologue_sync(p.cluster_size);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    set_max_registers_dec<kSplitProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (kTwoLoaders && (warp == 0 || warp == PagedKvLoader<QkBoxes, Fp8SplitSmem>::kHelperWarp)) {
      PagedKvLoader<QkBoxes, Fp8SplitSmem> kv{&kv_maps, p};
      run_kv_loader<kSplitMode, QkBoxes, false, Fp8SplitSmem, true>(p, kv, smem, warp == 0 ? 0 : 1);
    } else if (!kTwoLoaders && warp == 0) {
      PagedKvLoader<QkBoxes, Fp8SplitSmem> kv{&kv_maps, p};
      run_kv_loader<kSplitMode, QkBoxes, false, Fp8SplitSmem>(p, kv, smem);
    } else if (threadIdx.x == 32) {  // Q loader
      if (p.q_staged) {
        run_q_stager<QkBoxes, Fp8SplitSmem::kQGateBlocks>(p, &q_maps, smem + L::q_staging, staging_full,
                                                          staging_full + 1, Fp8SplitSmem::q_issued(smem));
      } else {
        grid_dependency_wait();  // the quantised Q
        run_q_loader<QkBoxes, Fp8SplitSmem, /*kCheckDcp=*/true, /*kSlicedRows=*/true>(p, &q_maps, smem);
      }
    }
  } else if (wg == 1) {
    set_max_registers_dec<kSplitSoftmaxRegs>();
    grid_dependency_wait();  // the Q scales (a no-op without the quantiser)
    run_split_softmax<kSplitMode, QkBoxes>(p, smem);
  } else {
    set_max_registers_inc<kSplitPvRegs>();
    run_split_pv<kSplitMode, QkBoxes, kPvAcc>(p, smem, wg - 2);
  }
  // A 2-CTA cluster's stages are filled by both CTAs (multicast): neither leaves while
  // the other may still write or arrive here.
  if (p.cluster_size > 1) cluster_barrier();
}

}  // namespace fp8

bool split_roles_enabled() { return env_switch_not_never("KBMLA_FP8_SPLIT_ROLES"); }

bool fp8_split_kernel_wanted(const DecodeParams& p) { return fp8_split_roles(p) && split_roles_enabled(); }

namespace {
template <int QkBoxes, bool kTwoLoaders = false, int kPvAcc = 32>
void launch_split(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid,
                  cudaStream_t stream, bool after_quantiser) {
  constexpr auto kernel = fp8::mla_decode_fp8_split_kernel<QkBoxes, kTwoLoaders, kPvAcc>;
  const cudaError_t attr_err = reserve_dynamic_smem<kernel>(int(fp8::SplitSmemLayout::alloc));
  launch_clustered(kernel, fp8::SplitSmemLayout::alloc, attr_err, q_maps, kv_maps, p, grid, stream, "decode (fp8 split)",
                   /*programmatic=*/after_quantiser, fp8::kSplitThreads);
}
}  // namespace

void launch_decode_fp8_split(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid,
                             cudaStream_t stream, bool after_quantiser) {
  // d_qk 512 keeps P V over 64 rows: over 48 it measured 0.6-1.9 % slower on a 12-head
  // q_len-4 batch (bench/NOTES.md v36). (d_qk 512 with pages of 8 or 16 tokens keeps the
  // alternating kernel: kernel.hpp.)
  if (p.d_qk == kDqkNoRope) {
    // (Its P V over 64 rows writes 64 rows a CTA: no 48-row slices, kernel.hpp.)
    require(p.cta_rows == kRowsPerCta, "decode (fp8 split, d_qk 512): CTA row slices of ", p.cta_rows,
            " rows; this kernel needs ", kRowsPerCta);
    return launch_split<kLatentBoxes>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  }
  // P V over the tile's rows (kernel.hpp, with_split_pv_acc), with one or two loader warps.
  with_split_pv_acc(split_cta_rows(p), [&](auto acc) {
    if (two_loader_warps(p)) {
      return launch_split<kQkBoxes, true, acc()>(q_maps, kv_maps, p, grid, stream, after_quantiser);
    }
    launch_split<kQkBoxes, false, acc()>(q_maps, kv_maps, p, grid, stream, after_quantiser);
  });
}

}  // namespace kbmla::sm90
