// Which decode kernel a call's DecodeParams select (kernel.hpp, KernelChoice): the launch
// functions of kernel.cu, kernel_fp8.cu and kernel_fp8_block.cu dispatch on these, and
// describe_decode reports them (host code only; the reasons for each rule are at the
// predicates in kernel.hpp).
#include "kbmla/error.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla::sm90 {

KernelChoice choose_bf16_kernel(const DecodeParams& p, KernelMode mode) {
  require(p.d_qk == kDqk || p.d_qk == kDqkNoRope, "decode: d_qk (", p.d_qk, ") is not supported; supported: ", kDqk,
          ", ", kDqkNoRope);
  KernelChoice k;
  if (p.gather_rows) {  // small pages: the row-gather instantiations, full mode only
    require(mode == KernelMode::kFull, "decode: page_size ", p.page_size, " (row gather) has the full kernel only");
    k.gather_rows = true;
    return k;
  }
  if (p.d_qk == kDqkNoRope) {
    require(mode == KernelMode::kFull, "decode: d_qk ", kDqkNoRope, " has the full kernel only (no spike modes)");
    return k;
  }
  // (The spike modes keep the one-loader 64-row consumers: bench --spike of a tile of at
  // most 16 rows measures those.)
  if (mode != KernelMode::kFull) return k;
  if (two_loader_warps(p)) {
    k.two_loader_warps = true;
  } else if (bf16_narrow_tile(p)) {
    k.kernel = DecodeKernel::kBf16Narrow;
  }
  return k;
}

KernelChoice choose_fp8_kernel(const DecodeParams& p) {
  require(p.d_qk == kDqk || p.d_qk == kDqkNoRope, "decode (fp8): d_qk (", p.d_qk, ") is not supported; supported: ",
          kDqk, ", ", kDqkNoRope);
  KernelChoice k;
  k.gather_rows = p.gather_rows;
  if (fp8_split_kernel_wanted(p)) {
    k.kernel = DecodeKernel::kFp8Split;
    // d_qk 512 keeps P V over 64 rows and one loader warp (kernel_fp8_split.cu says why).
    if (p.d_qk == kDqk) {
      k.pv_rows = with_split_pv_acc(split_cta_rows(p), [](auto acc) { return 2 * acc(); });
      k.two_loader_warps = two_loader_warps(p);
    }
    return k;
  }
  k.kernel = fp8_narrow(p.rows, p.cluster_size) ? DecodeKernel::kFp8Narrow : DecodeKernel::kFp8Alternating;
  // Two loader warps for pages of 8 and 16 tokens, d_qk 576 only, to keep the
  // instantiations few: d_qk 512 loads them with one warp (not measured there; d_qk 576's
  // page 16 gained 9-10 %, bench/NOTES.md v31).
  k.two_loader_warps = p.d_qk == kDqk && two_loader_warps(p);
  k.cluster_copies = p.d_qk == kDqk && !k.two_loader_warps && k.kernel == DecodeKernel::kFp8Alternating &&
                     p.cluster_size > 1;
  return k;
}

KernelChoice choose_fp8_block_kernel(const DecodeParams& p) {
  require(p.d_qk == kDqk, "decode (fp8 per-block): d_qk (", p.d_qk, ") must be ", kDqk);
  KernelChoice k;
  k.gather_rows = p.gather_rows;
  k.two_loader_warps = two_loader_warps(p);
  if (fp8_block_split_kernel_wanted(p)) {
    k.kernel = DecodeKernel::kFp8BlockSplit;
    k.pv_rows = with_split_pv_acc(split_cta_rows(p), [](auto acc) { return 2 * acc(); });
    return k;
  }
  k.kernel = fp8_block_narrow(p.rows, p.cluster_size) ? DecodeKernel::kFp8BlockNarrow
                                                      : DecodeKernel::kFp8BlockAlternating;
  return k;
}

}  // namespace kbmla::sm90
