// describe_decode: the kernels and operand precisions of a decode call, from the same
// choices the call dispatches on (sm90::choose_*_kernel on the DecodeParams fields that
// kernel_choice_params sets, choose_q_path, the combine's grid), so that the bench and the
// accuracy tests report what runs.
#include <algorithm>
#include <string>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "src/runtime/plan_impl.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla {

namespace {

std::string kernel_name(sm90::DecodeKernel k, int pv_rows) {
  using sm90::DecodeKernel;
  switch (k) {
    case DecodeKernel::kBf16Tile64: return "bf16, 64-row tile (two consumer warpgroups, O in column halves)";
    case DecodeKernel::kBf16Narrow: return "bf16 narrow (S^T and O^T with N = 16)";
    case DecodeKernel::kFp8Alternating: return "fp8 per-tensor, two consumers alternating blocks";
    case DecodeKernel::kFp8Narrow: return "fp8 per-tensor narrow (S^T, P V with N = 16)";
    case DecodeKernel::kFp8Split:
      return "fp8 per-tensor split roles (a softmax warpgroup, two P V warpgroups), P V over " +
             std::to_string(pv_rows) + " rows";
    case DecodeKernel::kFp8BlockAlternating: return "fp8 per-block scales, two consumers alternating blocks";
    case DecodeKernel::kFp8BlockNarrow: return "fp8 per-block scales narrow (S^T, P V with N = 16)";
    case DecodeKernel::kFp8BlockSplit:
      return "fp8 per-block scales split roles (a softmax warpgroup, two P V warpgroups), P V over " +
             std::to_string(pv_rows) + " rows";
  }
  return "unknown";
}

std::string q_operand(detail::QPath q, KvDtype dtype, bool split_roles) {
  const std::string what = dtype == KvDtype::kFp8E4m3PerBlock ? "latent e4m3 per row" : "e4m3 per row";
  const std::string rope = dtype == KvDtype::kFp8E4m3PerBlock ? "; rope bf16" : "";
  switch (q) {
    case detail::QPath::kBf16: return "bf16 (the caller's)";
    case detail::QPath::kCallerE4m3:
      return dtype == KvDtype::kFp8E4m3PerBlock ? "latent e4m3 (the caller's, one scale); rope bf16 (the caller's q_pe)"
                                                : "e4m3 (the caller's, one scale)";
    case detail::QPath::kQuantiserKernel: return what + ", by the Q quantiser kernel before the decode" + rope;
    case detail::QPath::kInline:
      return what + (split_roles ? ", quantised by the decode's P V warpgroups" : ", quantised by the decode's consumers") +
             rope;
    case detail::QPath::kStaged: return what + ", bf16 rows staged by TMA and quantised by the softmax warpgroup";
  }
  return "unknown";
}

}  // namespace

std::string DecodePath::summary() const {
  return kernel + (cluster_size > 1 ? " in " + std::to_string(cluster_size) + "-CTA clusters (KV multicast)" : "") +
         ", " + std::to_string(cta_rows) + " rows a CTA; Q " + q_operand + "; P " + p_operand + "; KV " + kv_loader +
         "; combine " + combine;
}

namespace detail {

DecodePath describe_decode(const DevicePlan::Impl& P, QDtype q_dtype) {
  const DecodeConfig& c = P.config;
  const QPath q = choose_q_path(P, q_dtype);
  const sm90::DecodeParams p = kernel_choice_params(P);
  sm90::KernelChoice k;
  switch (c.kv_dtype) {
    case KvDtype::kBFloat16: k = sm90::choose_bf16_kernel(p, sm90::KernelMode::kFull); break;
    case KvDtype::kFp8E4m3: k = sm90::choose_fp8_kernel(p); break;
    case KvDtype::kFp8E4m3PerBlock: k = sm90::choose_fp8_block_kernel(p); break;
  }
  DecodePath d;
  d.kernel = kernel_name(k.kernel, k.pv_rows);
  d.cluster_size = p.cluster_size;
  d.cta_rows = std::min(p.rows, p.cta_rows);
  d.q_operand = q_operand(q, c.kv_dtype,
                          k.kernel == sm90::DecodeKernel::kFp8Split || k.kernel == sm90::DecodeKernel::kFp8BlockSplit);
  // (The fp8 kernels' P is relative to a row maximum at most 2^8 behind, so below 448.)
  // The per-block split kernel puts the group factors on V instead (bench/NOTES.md v51).
  d.p_operand = c.kv_dtype == KvDtype::kBFloat16      ? "bf16"
                : c.kv_dtype == KvDtype::kFp8E4m3     ? "e4m3"
                : k.kernel == sm90::DecodeKernel::kFp8BlockSplit
                    ? "e4m3, one tile (the group factors scale_g[token] / M_g on V, in registers)"
                    : "e4m3, a tile per 128-column group (P x scale_g[token] / M_g)";
  d.fp8_products = c.kv_dtype != KvDtype::kBFloat16;
  if (k.gather_rows) {
    d.kv_loader = "cp.async row gather (" + std::to_string(c.page_size) + "-token pages)";
  } else {
    d.kv_loader = "TMA, parts of " + std::to_string(std::min(c.page_size, sm90::kBlockTokens)) + " tokens" +
                  (k.two_loader_warps ? ", two loader warps" : ", one loader warp");
  }
  const CombineParams cp = combine_plan_params(P);
  const int64_t blocks = combine_blocks(cp);
  if (P.device_planned) {
    d.combine = std::string("merge kernel, launched for any seqlens (a device-made plan)") +
                (early_merges_wanted(P, cp) ? ", early merges" : "");
  } else if (blocks == 0) {
    d.combine = "none (no split request)";
  } else {
    const CombineKernelChoice ck = combine_kernel_choice(cp);
    d.combine = "merge kernel, " + std::to_string(blocks) + " blocks of " + std::to_string(ck.warps) + " warps" +
                (ck.narrow_only ? " (narrow merges only)" : ck.dense ? " (dense)" : "") +
                (cp.invariant_order && cp.num_wide_requests > 0 ? ", batch-invariant order" : "") +
                (early_merges_wanted(P, cp) ? ", early merges" : "");
  }
  return d;
}

}  // namespace detail

DecodePath describe_decode(const DevicePlan& plan, const KvCache& cache, QDtype q_dtype) {
  const DecodeConfig& c = plan.config();
  require(cache.page_size() == c.page_size && cache.d_qk() == c.d_qk && cache.dtype() == c.kv_dtype,
          "describe_decode: cache (page_size ", cache.page_size(), ", d_qk ", cache.d_qk(), ", ",
          kv_dtype_name(cache.dtype()), ") does not match the plan's config (page_size ", c.page_size, ", d_qk ",
          c.d_qk, ", ", kv_dtype_name(c.kv_dtype), ")");
  return detail::describe_decode(plan.impl(), q_dtype);
}

}  // namespace kbmla
