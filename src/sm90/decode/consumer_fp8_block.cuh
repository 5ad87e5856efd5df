// Roles of the per-block-scale fp8 kernel (config_fp8_block.hpp) that differ from the
// per-tensor kernel's (consumer_fp8.cuh, whose consumer loop, fragment layouts, ownership
// alternation and deferred P V they share through PerBlockScaling): the scale helper warp,
// S with its per-group fold, the four P tiles, and P V with the group factors.
#pragma once

#include <cuda_fp16.h>

#include "src/sm90/decode/config_fp8_block.hpp"
#include "src/sm90/decode/consumer_fp8.cuh"

namespace kbmla::sm90::fp8_block {

using fp8::swizzled64;

// Scale helper (warp 2 of the producer warpgroup): per block, once the stage is in, the
// maximum of each group's scales over the block's real tokens (lane l reads tokens l and
// l + 32), the running maximum M_g over the item's blocks (at least FLT_MIN, so that 1 / M_g
// is finite) and the O factors (SmemLayout::group_factors); the scales transposed in place
// to [group][token] (the fold's 8-byte loads) and, for the wide rows, the P factors
// scale_g[t] / M_g as half2 pairs of tokens (SmemLayout::p_ratios); then the stage's ready
// barrier. Rows past the
// request's last token may hold anything: their scales become 0.
template <bool kNarrow>
__device__ __forceinline__ void run_scale_helper(const DecodeParams& p, uint8_t* smem) {
  using SmemLayout = SmemLayoutT<kNarrow>;
  constexpr int kStages = SmemLayout::kStages;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* full = bars + 2;
  uint64_t* ready = bars + 2 + 2 * kStages;
  float4* factors = reinterpret_cast<float4*>(smem + SmemLayout::group_factors);
  const int lane = threadIdx.x % 32;
  int block_count = 0;
  for_each_work_tile(p, [&](const WorkTileInfo& w) {
    const Item it = resolve_item(p, w);
    if (!it.run) return;
    float4 m = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      Mbarrier::wait(full + stage, (block_count / kStages) & 1);
      const int valid = it.seqlen - blk * kBlockTokens;
      float* scales = reinterpret_cast<float*>(smem + SmemLayout::kv + stage * kStageBytes + kQkBoxes * fp8::kBoxBytes);
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      const float4 a = lane < valid ? reinterpret_cast<const float4*>(scales)[lane] : zero;
      const float4 b = lane + 32 < valid ? reinterpret_cast<const float4*>(scales)[lane + 32] : zero;
      // Non-negative floats order as their bit patterns: an integer warp maximum.
      auto block_max = [&](float x, float y) {
        return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(fmaxf(fabsf(x), fabsf(y)))));
      };
      const float kFloor = 1.17549435e-38f;  // FLT_MIN
      float4 m_new;
      m_new.x = fmaxf(fmaxf(m.x, block_max(a.x, b.x)), kFloor);
      m_new.y = fmaxf(fmaxf(m.y, block_max(a.y, b.y)), kFloor);
      m_new.z = fmaxf(fmaxf(m.z, block_max(a.z, b.z)), kFloor);
      m_new.w = fmaxf(fmaxf(m.w, block_max(a.w, b.w)), kFloor);
      const float4 inv = make_float4(1.f / m_new.x, 1.f / m_new.y, 1.f / m_new.z, 1.f / m_new.w);
      if (lane == 0) {
        factors[3 * stage + 0] = m_new;
        factors[3 * stage + 1] = inv;
        factors[3 * stage + 2] = blk == it.blk_begin
                                     ? make_float4(1.f, 1.f, 1.f, 1.f)
                                     : make_float4(m.x / m_new.x, m.y / m_new.y, m.z / m_new.z, m.w / m_new.w);
      }
      m = m_new;
      __syncwarp();  // every lane has read the [token][group] scales
      scales[0 * kBlockTokens + lane] = a.x;
      scales[1 * kBlockTokens + lane] = a.y;
      scales[2 * kBlockTokens + lane] = a.z;
      scales[3 * kBlockTokens + lane] = a.w;
      scales[0 * kBlockTokens + lane + 32] = b.x;
      scales[1 * kBlockTokens + lane + 32] = b.y;
      scales[2 * kBlockTokens + lane + 32] = b.z;
      scales[3 * kBlockTokens + lane + 32] = b.w;
      __syncwarp();
      __half2* ratios = reinterpret_cast<__half2*>(smem + SmemLayout::p_ratios) + stage * kGroups * 32;
      // (The narrow rows' P factors are per lane token, from the scales: no pairs.)
#pragma unroll
      for (int g = 0; g < (kNarrow ? 0 : kGroups); ++g) {
        const float2 pair = reinterpret_cast<const float2*>(scales + g * kBlockTokens)[lane];
        const float f = g == 0 ? inv.x : g == 1 ? inv.y : g == 2 ? inv.z : inv.w;
        ratios[g * 32 + lane] = __floats2half2_rn(pair.x * f, pair.y * f);
      }
      // The stage's scale box is rewritten by TMA next round: order these generic writes
      // before that (async proxy).
      fence_view_async_shared();
      __syncwarp();
      if (lane == 0) Mbarrier::arrive(ready + stage);
    }
  });
}

// This consumer's two groups (2 wg, 2 wg + 1) of a per-stage float4.
__device__ __forceinline__ float2 own_groups(int wg, float4 v) {
  return wg == 0 ? make_float2(v.x, v.y) : make_float2(v.z, v.w);
}

// O^T blocks b = 0, 1 hold dims of group 2 wg, b = 2, 3 of group 2 wg + 1: the block's
// M_g(old) / M_g(new) before its P V adds in (uniform over the warpgroup; rare: M_g only
// grows).
// O^T blocks of this consumer's two groups times f.x (b = 0, 1) and f.y (b = 2, 3).
template <int kAcc>
__device__ __forceinline__ void scale_groups(float (&o)[4][kAcc], float2 f) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    o[0][i] *= f.x;
    o[1][i] *= f.x;
    o[2][i] *= f.y;
    o[3][i] *= f.y;
  }
}

template <int kAcc>
__device__ __forceinline__ void rescale_groups(int wg, float (&o)[4][kAcc], const float4* factors, int stage) {
  const float2 r = own_groups(wg, factors[3 * stage + 2]);
  if (r.x != 1.f || r.y != 1.f) scale_groups(o, r);
}

// The tiles' k-steps (config_fp8_block.hpp: 128-byte rows, 128-byte swizzle): latent box g
// (group g, 4 k-steps of 32 e4m3) and the rope box after the four (4 k-steps of 16 bf16);
// kQBox: the Q tile's box bytes (16 or 64 rows).
template <uint32_t kQBox>
__device__ __forceinline__ uint32_t q_step(int box, int k) {
  return box * kQBox + k * 32;
}
__device__ __forceinline__ uint32_t kv_step(int box, int k) { return box * fp8::kLatentBoxBytes + k * 32; }

// The bf16 rope product into s, one commit group.
template <uint32_t kQBox>
__device__ __forceinline__ void issue_s_rope(uint64_t q_desc, uint64_t k_desc, float (&s)[32]) {
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    wgmma_qk(desc_advance(q_desc, q_step<kQBox>(kGroups, k)), desc_advance(k_desc, kv_step(kGroups, k)), s, k > 0);
  }
  wgmma_commit();
}

// Group g's e4m3 product (its 128 dims) into t, one commit group.
template <uint32_t kQBox>
__device__ __forceinline__ void issue_s_group(uint64_t q_desc, uint64_t k_desc, int g, float (&t)[32]) {
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    wgmma_qk_fp8(desc_advance(q_desc, q_step<kQBox>(g, k)), desc_advance(k_desc, kv_step(g, k)), t, k > 0);
  }
  wgmma_commit();
}

// The lane's scales of group g (tokens 8i + col_pair + {0, 1}) from the transposed scales.
__device__ __forceinline__ void load_group_scales(const float* scales, int g, int col_pair, float2 (&sc)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) sc[i] = *reinterpret_cast<const float2*>(scales + g * kBlockTokens + 8 * i + col_pair);
}

// S of the block in units of the row's Q scale: rope / q_scale + sum_g scale_g[token] x
// (Q8_g . K8_g). Group g + 1 issues once group g is folded (two accumulators fit the
// register budget, not three). scales: the stage's [4 groups][64 tokens] fp32 (transposed
// by the helper). kScalesAhead (the split kernel's softmax warpgroup; the alternating
// kernel's consumers, which hold O, lack the 16 registers): each group's scales are loaded
// right after its wgmma issue. Loaded after the wait (its memory clobber keeps them there),
// the fold's first FFMA waited for them behind the stage's wgmma and TMA traffic (ncu,
// lognormal_H16_Sq4: ~20 % of the split softmax warpgroup's samples, v33). kSGroups < 4:
// probe builds only (the first groups' products; wrong S).
template <bool kScalesAhead = false, int kSGroups = kGroups>
__device__ __forceinline__ void compute_s(uint32_t q_addr, uint32_t stage_addr, const float* scales, int col_pair,
                                          float inv_qs0, float inv_qs1, float (&s)[32]) {
  constexpr uint32_t kQBox = SmemLayoutT<false>::kQLatentBoxBytes;
  const uint64_t q_desc = desc_k_major(q_addr), k_desc = desc_k_major(stage_addr);
  float t[32];
  float2 sc[8];
  issue_s_rope<kQBox>(q_desc, k_desc, s);
  issue_s_group<kQBox>(q_desc, k_desc, 0, t);
  if constexpr (kScalesAhead) load_group_scales(scales, 0, col_pair, sc);
  wgmma_wait<1>();
  sm90::fence_accumulators(s);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    s[4 * i + 0] *= inv_qs0;
    s[4 * i + 1] *= inv_qs0;
    s[4 * i + 2] *= inv_qs1;
    s[4 * i + 3] *= inv_qs1;
  }
#pragma unroll
  for (int g = 0; g < kSGroups; ++g) {
    wgmma_wait<0>();
    sm90::fence_accumulators(t);
    if constexpr (!kScalesAhead) load_group_scales(scales, g, col_pair, sc);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[4 * i + 0] = fmaf(t[4 * i + 0], sc[i].x, s[4 * i + 0]);
      s[4 * i + 1] = fmaf(t[4 * i + 1], sc[i].y, s[4 * i + 1]);
      s[4 * i + 2] = fmaf(t[4 * i + 2], sc[i].x, s[4 * i + 2]);
      s[4 * i + 3] = fmaf(t[4 * i + 3], sc[i].y, s[4 * i + 3]);
    }
    if (g + 1 < kSGroups) {
      sm90::fence_accumulators(t);
      issue_s_group<kQBox>(q_desc, k_desc, g + 1, t);
      if constexpr (kScalesAhead) load_group_scales(scales, g + 1, col_pair, sc);
    }
  }
}

// The block's four P tiles from p (fp32, exp'd, in the S fragment layout): tile g holds
// P x scale_g[token] / M_g in e4m3 (<= P <= 2^kRescaleSlack), in the A fragment's token
// order (consumer_fp8.cuh). The products run in half2 (P <= 256, the factors <= 1; e4m3
// keeps 3 mantissa bits of the 10) with the helper's factor pairs: one multiply and one
// conversion per two values (the fp32 version was the largest item of the owner's
// softmax, ncu). Tiles of this consumer's groups go to its own buffer, the other's over
// the stage's rope boxes.
__device__ __forceinline__ void write_p_tiles(int wg, const float (&pv)[32], const __half2* ratios, uint8_t* own_p,
                                              uint8_t* stage_rope, int r0, int r1, int lane) {
  __half2 h0[8], h1[8];  // rows r0, r1: tokens 8i + col_pair + {0, 1}
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    h0[i] = __floats2half2_rn(pv[4 * i + 0], pv[4 * i + 1]);
    h1[i] = __floats2half2_rn(pv[4 * i + 2], pv[4 * i + 3]);
  }
  const int col_pair = 2 * (lane % 4);
  auto e4m3x2 = [](__half2 x) -> uint32_t {
    return __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(x), __NV_SATFINITE, __NV_E4M3);
  };
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    uint8_t* tile = ((g >> 1) == wg ? own_p : stage_rope) + (g & 1) * SmemLayoutT<false>::kPBytes;
    const __half2* rg = ratios + g * 32 + lane % 4;  // token pair 4i + lane % 4
#pragma unroll
    for (int gi = 0; gi < 4; ++gi) {
      const __half2 ra = rg[8 * gi], rb = rg[8 * gi + 4];  // i = 2 gi, 2 gi + 1
      *reinterpret_cast<uint32_t*>(tile + swizzled64(r0, 16 * gi + 2 * col_pair)) =
          e4m3x2(__hmul2(h0[2 * gi], ra)) | (e4m3x2(__hmul2(h0[2 * gi + 1], rb)) << 16);
      *reinterpret_cast<uint32_t*>(tile + swizzled64(r1, 16 * gi + 2 * col_pair)) =
          e4m3x2(__hmul2(h1[2 * gi], ra)) | (e4m3x2(__hmul2(h1[2 * gi + 1], rb)) << 16);
    }
  }
}

// O^T += V^T P_g^T over the block: M blocks b = 0, 1 take the P tile of group 2 wg
// (p_addr), b = 2, 3 that of 2 wg + 1 (the next 4 KiB). One commit group; the caller waits.
template <int kAcc>
__device__ __forceinline__ void issue_pv_grouped(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint32_t p_addr) {
  constexpr uint32_t kPBytes = SmemLayoutT<kAcc == 8>::kPBytes;
  const uint64_t p_desc = desc_k_major_sw64(p_addr);
  wgmma_fence();
  fp8::fence_accumulators(o);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
      wgmma_pv_fp8_rs(a[b][kb], desc_advance(p_desc, (b >> 1) * kPBytes + kb * 32), o[b]);
    }
  }
  wgmma_commit();
}

// S^T (64 tokens x 16 rows, rows_fp8.cuh's NarrowRows) of the block in units of the row's Q
// scale: the rope product and the four group products issued at once (8 accumulators
// each: all fit, no wait between them), then folded: rope / q_scale + sum_g scale_g[token]
// x t_g. The lane's tokens are 16w + l/4 and + 8 (two scales per group). The Q tile's boxes
// are 16 rows, the stage's 64 tokens.
__device__ __forceinline__ void compute_st(uint32_t q_addr, uint32_t stage_addr, const float* scales,
                                           const float (&inv_qs)[4], float (&s)[8]) {
  constexpr uint32_t kQBox = SmemLayoutT<true>::kQLatentBoxBytes;
  const uint64_t q_desc = desc_k_major(q_addr), k_desc = desc_k_major(stage_addr);
  float t[kGroups][8];
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    wgmma_kq_bf16(desc_advance(k_desc, kv_step(kGroups, k)), desc_advance(q_desc, q_step<kQBox>(kGroups, k)), s, k > 0);
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_kq_fp8(desc_advance(k_desc, kv_step(g, k)), desc_advance(q_desc, q_step<kQBox>(g, k)), t[g], k > 0);
    }
  }
  wgmma_commit();
  // The lane's scales load while the products run.
  const int token = 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4;
  float sc[2][kGroups];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) sc[h][g] = scales[g * kBlockTokens + token + 8 * h];
  }
  wgmma_wait<0>();
  sm90::fence_accumulators(s);
#pragma unroll
  for (int g = 0; g < kGroups; ++g) sm90::fence_accumulators(t[g]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = 4 * (j >> 1) + 2 * h + (j & 1);
      float x = s[k] * inv_qs[j];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) x = fmaf(t[g][k], sc[h][g], x);
      s[k] = x;
    }
  }
}

// The per-row state of the per-block kernel's consumers: the per-tensor kernel's (rows_fp8.cuh)
// with S in units of the row's Q scale (kv scale 1: the scales are in S and P), S from the
// group fold, and four P tiles. Tiles of this consumer's groups go to `own_p`, the other's
// over the stage's rope boxes.
struct BlockWideRows : fp8::WideRows<kQkBoxes> {
  float inv_qs0, inv_qs1;

  __device__ __forceinline__ BlockWideRows(int warp, int lane) : fp8::WideRows<kQkBoxes>(warp, lane) {}

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it, fp8::QScales qs) {
    fp8::WideRows<kQkBoxes>::begin_item(p, it, 1.f, qs);
    inv_qs0 = 1.f / qs(r0);
    inv_qs1 = 1.f / qs(r1);
  }

  __device__ __forceinline__ void block_max(int wg, uint32_t q_addr, uint32_t stage_addr, const float* scales, int blk,
                                            float*) {
    compute_s(q_addr, stage_addr, scales, col_pair, inv_qs0, inv_qs1, s);
    mask_invisible_keys(s, blk, col_pair, vis0, vis1, mask_from);
    block_row_max(s, mx0, mx1);
  }

  __device__ __forceinline__ void write_p(int wg, const float*, const __half2* ratios, float4, uint8_t* own_p,
                                         uint8_t* stage_rope, int lane) {
    exponentials();
    write_p_tiles(wg, s, ratios, own_p, stage_rope, r0, r1, lane);
  }

  // s becomes P (fp32, <= 2^kRescaleSlack); the row sums take the block's.
  __device__ __forceinline__ void exponentials() {
    const float neg_base0 = neg_base(m0), neg_base1 = neg_base(m1);
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[4 * i + 0] = fast_exp2(fmaf(s[4 * i + 0], f0, neg_base0));
      s[4 * i + 1] = fast_exp2(fmaf(s[4 * i + 1], f0, neg_base0));
      s[4 * i + 2] = fast_exp2(fmaf(s[4 * i + 2], f1, neg_base1));
      s[4 * i + 3] = fast_exp2(fmaf(s[4 * i + 3], f1, neg_base1));
      sum0 += s[4 * i + 0] + s[4 * i + 1];
      sum1 += s[4 * i + 2] + s[4 * i + 3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
  }
};

struct BlockNarrowRows : fp8::NarrowRows<kQkBoxes> {
  float inv_qs[4];

  __device__ __forceinline__ BlockNarrowRows(int warp, int lane) : fp8::NarrowRows<kQkBoxes>(warp, lane) {}

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it, fp8::QScales qs) {
    fp8::NarrowRows<kQkBoxes>::begin_item(p, it, 1.f, qs);
#pragma unroll
    for (int j = 0; j < 4; ++j) inv_qs[j] = 1.f / qs(row(n0, j));
  }

  __device__ __forceinline__ void block_max(int wg, uint32_t q_addr, uint32_t stage_addr, const float* scales, int blk,
                                            float* exchange) {
    compute_st(q_addr, stage_addr, scales, inv_qs, s);
    reduce_block_max(wg, blk, exchange);
  }

  // Tile g: P x scale_g[token] / M_g, in fp32 from the transposed scales (the lane's two
  // tokens; the wide rows' half2 ratio pairs are pairs of adjacent tokens, not these).
  __device__ __forceinline__ void write_p(int wg, const float* scales, const __half2*, float4 inv_max, uint8_t* own_p,
                                         uint8_t* stage_rope, int lane) {
    float pv[8];
    exponentials(pv);
    const int token = 16 * ((threadIdx.x / 32) % 4) + lane / 4;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float inv = g == 0 ? inv_max.x : g == 1 ? inv_max.y : g == 2 ? inv_max.z : inv_max.w;
      const float* sg = scales + g * kBlockTokens;
      const float2 factor = make_float2(sg[token] * inv, sg[token + 8] * inv);
      store_p<true>(((g >> 1) == wg ? own_p : stage_rope) + (g & 1) * SmemLayoutT<true>::kPBytes, pv, factor);
    }
  }
};

// What the per-block kernel's consumers do differently from the per-tensor kernel's, for
// fp8::run_consumer_loop: the stage waits also for the scale helper, hand-over slots
// block_count % 3, S from the group fold and four P tiles (Rows), P V per group (this
// consumer's own P tiles in its buffer, the other's over the stage's rope boxes) with the
// groups' factors, O of each group times M_g at the end. kAcc: O^T accumulators per M block,
// 8 (at most 16 query rows: P V with N = 16) or 32; consumer_fp8.cuh.
template <int kAcc_>
struct PerBlockScaling {
  using Layout = SmemLayoutT<kAcc_ == 8>;
  using Rows = std::conditional_t<kAcc_ == 8, BlockNarrowRows, BlockWideRows>;
  static constexpr int kAcc = kAcc_;
  static constexpr int kStages = Layout::kStages;
  static constexpr int kSlots = Layout::kHandoverSlots;
  static constexpr uint32_t kStageBytes = fp8_block::kStageBytes;
  uint64_t* bars;
  uint8_t* smem;
  const float4* factors;
  float2 group_max;  // M_g of this consumer's groups after the item's last block

  __device__ __forceinline__ PerBlockScaling(const DecodeParams&, uint8_t* smem_)
      : bars(reinterpret_cast<uint64_t*>(smem_ + Layout::barriers)),
        smem(smem_),
        factors(reinterpret_cast<const float4*>(smem_ + Layout::group_factors)),
        group_max(make_float2(1.f, 1.f)) {}

  __device__ __forceinline__ const float* scales(int stage) const {
    return reinterpret_cast<const float*>(smem + Layout::kv + stage * kStageBytes + kQkBoxes * fp8::kBoxBytes);
  }
  __device__ __forceinline__ uint8_t* own_p(int wg) const { return smem + Layout::own_p + wg * 2 * Layout::kPBytes; }

  // The helper's factors of the stage, then its data.
  __device__ __forceinline__ void wait_stage(int stage, uint32_t phase) const {
    Mbarrier::wait(bars + 2 + 2 * kStages + stage, phase);
    Mbarrier::wait(bars + 2 + stage, phase);
  }
  // The narrow kernel's consumers quantise a bf16 Q's latent part (p.q_inline;
  // q_inline_fp8.cuh), its bf16 rope bytes still come by TMA; the wide kernel has no room
  // for the row scales and always takes the quantiser's Q.
  static constexpr bool kInlineQ = kAcc_ == 8;
  static constexpr bool kRopeByTma = true;
  // Q given back at the end of the item, as before: after the last S (run_consumer_loop)
  // the 64-row tiles measured slower (lognormal_H16_Sq4 361 -> 370 us, B32_Sq4 318 -> 324;
  // 2 more bytes of spills), the 16-row ones level.
  static constexpr bool kEarlyQRelease = false;
  static constexpr int kQRows = Layout::kQRows;
  static constexpr int kQGroups = 64;  // the 512 latent columns
  static constexpr uint32_t kQBoxBytes = Layout::kQLatentBoxBytes;
  __device__ __forceinline__ void begin_item(Rows& rows, const DecodeParams& p, const Item& it, fp8::QScales qs) const {
    rows.begin_item(p, it, qs);
  }
  __device__ __forceinline__ void block_max(Rows& rows, int wg, uint32_t q_addr, uint32_t stage_addr, int stage,
                                            int blk, float* exchange) const {
    rows.block_max(wg, q_addr, stage_addr, scales(stage), blk, exchange);
  }
  __device__ __forceinline__ void write_p(Rows& rows, int wg, int stage, int, int lane) const {
    const __half2* ratios = reinterpret_cast<const __half2*>(smem + Layout::p_ratios) + stage * kGroups * 32;
    uint8_t* stage_rope = smem + Layout::kv + stage * kStageBytes + kRopeBox * fp8::kBoxBytes;
    rows.write_p(wg, scales(stage), ratios, factors[3 * stage + 1], own_p(wg), stage_rope, lane);
  }
  __device__ __forceinline__ void begin_o(float (&)[4][kAcc]) { group_max = make_float2(1.f, 1.f); }
  // O of each group times M_g(old) / M_g(new) before the block's P V; the item's last block
  // sets the groups' final M_g.
  __device__ __forceinline__ void before_pv(float (&o)[4][kAcc], int wg, int stage, bool last) {
    rescale_groups(wg, o, factors, stage);
    if (last) group_max = own_groups(wg, factors[3 * stage]);
  }
  __device__ __forceinline__ void issue_pv_other(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint32_t stage_addr,
                                                 int) const {
    issue_pv_grouped(o, a, stage_addr + kRopeBox * fp8::kBoxBytes);
  }
  __device__ __forceinline__ void issue_pv_own(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint32_t, int wg) const {
    issue_pv_grouped(o, a, smem_addr(own_p(wg)));
  }
  // O of group g is in units of M_g.
  __device__ __forceinline__ void finish_o(float (&o)[4][kAcc]) const { scale_groups(o, group_max); }
  __device__ __forceinline__ float out_scale() const { return 1.f; }
};

template <int kAcc>
__device__ __forceinline__ void run_consumer_fp8_block(const DecodeParams& p, uint8_t* smem, int wg) {
  fp8::run_consumer_loop<KernelMode::kFull, -1>(p, smem, wg, PerBlockScaling<kAcc>(p, smem));
}

}  // namespace kbmla::sm90::fp8_block
