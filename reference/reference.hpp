// Float64 CPU reference of MLA decode attention: the oracle for every kernel.
//
//   S = scale * Q K^T over all d_qk dims, O = softmax(S) V with V = the first d_v dims of
//   the same cached rows. Query token i of a request with L cached tokens sees keys
//   [0, L - q_len + i] when causal (bottom-right aligned), all L keys otherwise.
//   lse = ln sum_visible exp(scale q.k); a row with no visible key has O = 0, lse = -inf.
//
// Layouts (dense, row-major): q [B, q_len, H, d_qk]; cache [num_pages, page_size, d_qk];
// block_table [B, max_pages]; out [B, q_len, H, d_v]; lse [B, q_len, H].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kbmla/planner.hpp"
#include "reference/bf16.hpp"

namespace kbmla::ref {

struct Problem {
  int batch = 1;
  int q_len = 1;
  int heads = 1;
  int d_qk = 576;
  int d_v = 512;
  bool causal = true;
  double scale = 1.0;
  int page_size = 64;
  int64_t num_pages = 0;
  int max_pages = 0;  // block-table columns
};

template <class T>
struct Inputs {
  std::span<const T> q;
  std::span<const T> cache;
  std::span<const int32_t> block_table;
  std::span<const int32_t> seqlens;
};

struct Outputs {
  std::vector<double> out;  // [B, q_len, H, d_v]
  std::vector<double> lse;  // [B, q_len, H]
};

// Throws kbmla::Error on inconsistent sizes, seqlens beyond the block table, or page
// indices out of range (the reference never reads out of bounds either).
template <class T>
void validate(const Problem& p, const Inputs<T>& in);

// Keys visible to query token i of request b: [0, visible_keys).
int visible_keys(const Problem& p, int seqlen, int token);

// Attention of query token `token`, heads [h_begin, h_end), over keys [k_begin, k_end)
// of request b (no further masking). Writes o[(h - h_begin) * d_v + c] and lse[h - h_begin];
// an empty range gives 0 and -inf.
template <class T>
void attend(const Problem& p, const Inputs<T>& in, int b, int token, int h_begin, int h_end, int k_begin,
            int k_end, double* o, double* lse);

// The whole, unsplit reference.
template <class T>
Outputs reference_decode(const Problem& p, const Inputs<T>& in);

// Split emulation: walks `plan`'s work list exactly as the kernel's CTAs do (the seed's
// work-list scheduler, each CTA of a cluster taking its share of the tile's rows), runs
// the reference on each work item's KV block range, writes single-split requests
// directly, merges partials with the combine formula, and zero-fills the listed tiles.
// Outputs start as NaN, so a row nobody writes stays NaN. Throws if any item is visited
// twice.
template <class T>
Outputs emulate_split_decode(const Problem& p, const Inputs<T>& in, const HostPlan& plan);

// Combine of split partials for one row: lse = ln sum exp(lse_s), O = sum exp(lse_s - lse) O_s;
// -inf partials weigh 0; all -inf gives O = 0, lse = -inf.
void combine_row(std::span<const double> partial_lse, std::span<const double* const> partial_o, int d_v,
                 double* o, double* lse);

struct Comparison {
  double rel_frobenius;  // ||out - ref|| / ||ref|| over everything
  double worst_row_rel;  // max over rows of ||row - ref_row|| / max(||ref_row||, tiny)
  double lse_max_abs;    // max |lse - ref| over rows with finite reference lse
  bool any_nan;
  bool infinite_lse_mismatch;  // a -inf reference row not matched by -inf (or vice versa)
};
Comparison compare(const Problem& p, const Outputs& ref, std::span<const double> out, std::span<const double> lse);

}  // namespace kbmla::ref
