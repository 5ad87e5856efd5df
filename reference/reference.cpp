#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <limits>
#include <thread>

#include "kbmla/error.hpp"
#include "kbmla/schedulers.hpp"

namespace kbmla::ref {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int kKeyChunk = 256;

}  // namespace

template <class T>
void validate(const Problem& p, const Inputs<T>& in) {
  require(p.batch >= 1 && p.q_len >= 1 && p.heads >= 1, "reference: batch (", p.batch, "), q_len (", p.q_len,
          ") and heads (", p.heads, ") must be >= 1");
  require(p.d_v >= 1 && p.d_v <= p.d_qk, "reference: d_v (", p.d_v, ") must be in 1..d_qk (", p.d_qk, ")");
  require(p.page_size >= 1, "reference: page_size (", p.page_size, ") must be >= 1");
  const size_t q_size = size_t(p.batch) * p.q_len * p.heads * p.d_qk;
  require(in.q.size() == q_size, "reference: q has ", in.q.size(), " values, expected ", q_size);
  const size_t cache_size = size_t(p.num_pages) * p.page_size * p.d_qk;
  require(in.cache.size() == cache_size, "reference: cache has ", in.cache.size(), " values, expected ",
          cache_size);
  require(in.block_table.size() == size_t(p.batch) * p.max_pages, "reference: block_table has ",
          in.block_table.size(), " entries, expected ", size_t(p.batch) * p.max_pages);
  require(in.seqlens.size() == size_t(p.batch), "reference: seqlens has ", in.seqlens.size(),
          " entries, expected ", p.batch);
  for (int b = 0; b < p.batch; ++b) {
    const int64_t L = in.seqlens[b];
    require(L >= 0 && L <= int64_t{p.max_pages} * p.page_size, "reference: seqlens[", b, "] = ", L,
            " must be in 0..", int64_t{p.max_pages} * p.page_size, " (max_pages x page_size)");
    const int64_t used_pages = (L + p.page_size - 1) / p.page_size;
    for (int64_t j = 0; j < used_pages; ++j) {
      const int32_t page = in.block_table[size_t(b) * p.max_pages + j];
      require(page >= 0 && page < p.num_pages, "reference: block_table[", b, "][", j, "] = ", page,
              " must be in 0..", p.num_pages - 1);
    }
  }
}

int visible_keys(const Problem& p, int seqlen, int token) {
  if (!p.causal) return seqlen;
  return std::clamp(seqlen - p.q_len + token + 1, 0, seqlen);
}

template <class T>
void attend(const Problem& p, const Inputs<T>& in, int b, int token, int h_begin, int h_end, int k_begin,
            int k_end, double* o, double* lse) {
  const int nh = h_end - h_begin;
  std::fill(o, o + size_t(nh) * p.d_v, 0.0);
  if (k_end <= k_begin) {
    std::fill(lse, lse + nh, kNegInf);
    return;
  }
  std::vector<double> q(size_t(nh) * p.d_qk);
  for (int h = 0; h < nh; ++h) {
    const T* src = in.q.data() + ((size_t(b) * p.q_len + token) * p.heads + h_begin + h) * p.d_qk;
    for (int d = 0; d < p.d_qk; ++d) q[size_t(h) * p.d_qk + d] = to_double(src[d]);
  }
  std::vector<double> running_max(nh, kNegInf), running_sum(nh, 0.0);
  std::vector<double> keys(size_t(kKeyChunk) * p.d_qk), scores(size_t(nh) * kKeyChunk);
  for (int k0 = k_begin; k0 < k_end; k0 += kKeyChunk) {
    const int n = std::min(kKeyChunk, k_end - k0);
    for (int j = 0; j < n; ++j) {
      const int key = k0 + j;
      const int64_t page = in.block_table[size_t(b) * p.max_pages + key / p.page_size];
      const T* row = in.cache.data() + (size_t(page) * p.page_size + key % p.page_size) * p.d_qk;
      for (int d = 0; d < p.d_qk; ++d) keys[size_t(j) * p.d_qk + d] = to_double(row[d]);
    }
    for (int h = 0; h < nh; ++h) {
      const double* qh = &q[size_t(h) * p.d_qk];
      double chunk_max = kNegInf;
      for (int j = 0; j < n; ++j) {
        const double* kj = &keys[size_t(j) * p.d_qk];
        double dot = 0;
        for (int d = 0; d < p.d_qk; ++d) dot += qh[d] * kj[d];
        scores[size_t(h) * kKeyChunk + j] = dot * p.scale;
        chunk_max = std::max(chunk_max, dot * p.scale);
      }
      const double new_max = std::max(running_max[h], chunk_max);
      const double rescale = std::exp(running_max[h] - new_max);  // exp(-inf) = 0 on the first chunk
      double* oh = o + size_t(h) * p.d_v;
      for (int c = 0; c < p.d_v; ++c) oh[c] *= rescale;
      running_sum[h] *= rescale;
      for (int j = 0; j < n; ++j) {
        const double w = std::exp(scores[size_t(h) * kKeyChunk + j] - new_max);
        running_sum[h] += w;
        const double* vj = &keys[size_t(j) * p.d_qk];
        for (int c = 0; c < p.d_v; ++c) oh[c] += w * vj[c];
      }
      running_max[h] = new_max;
    }
  }
  for (int h = 0; h < nh; ++h) {
    double* oh = o + size_t(h) * p.d_v;
    for (int c = 0; c < p.d_v; ++c) oh[c] /= running_sum[h];
    lse[h] = running_max[h] + std::log(running_sum[h]);
  }
}

template <class T>
Outputs reference_decode(const Problem& p, const Inputs<T>& in) {
  validate(p, in);
  Outputs out;
  out.out.assign(size_t(p.batch) * p.q_len * p.heads * p.d_v, 0.0);
  out.lse.assign(size_t(p.batch) * p.q_len * p.heads, kNegInf);
  // (request, token, key chunk) tasks are independent: spread them over the cores, longest
  // first. A token's keys are cut into chunks of kRefKeyChunk so that a single long request
  // (a million tokens) still uses every core; chunks merge by LSE (combine_row) afterwards.
  // A token with at most kRefKeyChunk keys is one chunk, computed exactly as before.
  constexpr int kRefKeyChunk = 32768;
  struct Task {
    int b, token, k_begin, k_end;
    size_t part;  // index of its partial result
  };
  std::vector<Task> tasks;
  std::vector<size_t> first_part(size_t(p.batch) * p.q_len + 1, 0);
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.q_len; ++i) {
      const size_t bi = size_t(b) * p.q_len + i;
      const int keys = visible_keys(p, in.seqlens[b], i);
      const int chunks = std::max(1, (keys + kRefKeyChunk - 1) / kRefKeyChunk);
      first_part[bi + 1] = first_part[bi] + size_t(chunks);
      for (int c = 0; c < chunks; ++c) {
        tasks.push_back({b, i, c * kRefKeyChunk, std::min(keys, (c + 1) * kRefKeyChunk), first_part[bi] + c});
      }
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& x, const Task& y) { return x.k_end - x.k_begin > y.k_end - y.k_begin; });
  const size_t parts = first_part.back();
  std::vector<double> part_o(parts * p.heads * p.d_v), part_lse(parts * p.heads);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next.fetch_add(1)) < tasks.size();) {
      const Task& t = tasks[k];
      attend(p, in, t.b, t.token, 0, p.heads, t.k_begin, t.k_end, &part_o[t.part * p.heads * p.d_v],
             &part_lse[t.part * p.heads]);
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 32));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  std::vector<double> lse_of_parts;
  std::vector<const double*> o_of_parts;
  for (size_t bi = 0; bi + 1 < first_part.size(); ++bi) {
    const size_t n = first_part[bi + 1] - first_part[bi];
    for (int h = 0; h < p.heads; ++h) {
      const size_t row = bi * p.heads + h;
      if (n == 1) {
        const size_t part = first_part[bi];
        std::copy_n(&part_o[(part * p.heads + h) * p.d_v], p.d_v, &out.out[row * p.d_v]);
        out.lse[row] = part_lse[part * p.heads + h];
        continue;
      }
      lse_of_parts.clear();
      o_of_parts.clear();
      for (size_t part = first_part[bi]; part < first_part[bi + 1]; ++part) {
        lse_of_parts.push_back(part_lse[part * p.heads + h]);
        o_of_parts.push_back(&part_o[(part * p.heads + h) * p.d_v]);
      }
      combine_row(lse_of_parts, o_of_parts, p.d_v, &out.out[row * p.d_v], &out.lse[row]);
    }
  }
  return out;
}

void combine_row(std::span<const double> partial_lse, std::span<const double* const> partial_o, int d_v,
                 double* o, double* lse) {
  double max_lse = kNegInf;
  for (double l : partial_lse) max_lse = std::max(max_lse, l);
  std::fill(o, o + d_v, 0.0);
  if (max_lse == kNegInf) {
    *lse = kNegInf;
    return;
  }
  double sum = 0;
  for (double l : partial_lse) sum += std::exp(l - max_lse);
  const double total = max_lse + std::log(sum);
  for (size_t s = 0; s < partial_lse.size(); ++s) {
    if (partial_lse[s] == kNegInf) continue;
    const double w = std::exp(partial_lse[s] - total);
    for (int c = 0; c < d_v; ++c) o[c] += w * partial_o[s][c];
  }
  *lse = total;
}

template <class T>
Outputs emulate_split_decode(const Problem& p, const Inputs<T>& in, const HostPlan& plan) {
  validate(p, in);
  const PlanShape& s = plan.shape;
  require(s.batch == p.batch && s.heads == p.heads && s.q_len == p.q_len && s.causal == p.causal,
          "emulate: plan shape (batch ", s.batch, ", heads ", s.heads, ", q_len ", s.q_len,
          ") does not match the problem (batch ", p.batch, ", heads ", p.heads, ", q_len ", p.q_len, ")");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int rows = p.heads * p.q_len;
  Outputs out;
  out.out.assign(size_t(p.batch) * rows * p.d_v, nan);
  out.lse.assign(size_t(p.batch) * rows, nan);
  std::vector<double> part_o(size_t(plan.counts.num_slots) * rows * p.d_v, nan);
  std::vector<double> part_lse(size_t(plan.counts.num_slots) * rows, nan);
  std::vector<char> seen(plan.work_list.size(), 0);

  const int rows_per_cta = s.tile_rows / s.cluster_size;
  StaticTileSchedulerParams params(true, p.batch, plan.counts.num_q_tiles, s.cluster_size, 1);
  const int grid = plan.counts.num_active_clusters * s.cluster_size;
  std::vector<double> o_tmp(size_t(p.heads) * p.d_v), lse_tmp(p.heads);
  for (int cta = 0; cta < grid; ++cta) {
    WorkListTileScheduler sched(params, plan.work_list.data(), cta, grid);
    for (int idx = cta;; idx += grid) {
      require(size_t(idx / s.cluster_size) < plan.work_list.size(), "emulate: CTA ", cta,
              " walked past the end of the work list (", plan.work_list.size(), " entries) without a negative entry");
      WorkTileInfo w = sched.current_work();
      if (!w.valid) break;
      if (w.cta_in_cluster == 0) {
        char& mark = seen[size_t(idx / s.cluster_size)];
        require(mark == 0, "emulate: work-list entry ", idx / s.cluster_size, " visited twice");
        mark = 1;
      }
      sched.advance();
      const int b = w.batch;
      const int L = in.seqlens[b];
      const int ns = plan.num_splits[b];
      require(ns > 0 && w.split < ns, "emulate: item (tile ", w.q_tile, ", request ", b, ", split ", w.split,
              ") has no split-table entry (num_splits ", ns, ")");
      const int off = plan.bounds_offset[b];
      const int k_begin = plan.bounds[off + w.split] * s.kv_block;
      const int k_end = std::min(L, plan.bounds[off + w.split + 1] * s.kv_block);
      const int r_begin = w.q_tile * s.tile_rows + w.cta_in_cluster * rows_per_cta;
      const int r_end = std::min(rows, r_begin + rows_per_cta);
      // Rows of one token are consecutive: handle them one token (head run) at a time.
      for (int r = r_begin; r < r_end;) {
        const int token = r / p.heads;
        const int h0 = r % p.heads;
        const int h1 = std::min(p.heads, h0 + (r_end - r));
        const int kv_end = std::min(k_end, visible_keys(p, L, token));
        attend(p, in, b, token, h0, h1, k_begin, kv_end, o_tmp.data(), lse_tmp.data());
        for (int h = h0; h < h1; ++h) {
          const size_t row = size_t(token) * p.heads + h;
          double* dst_o;
          double* dst_lse;
          if (ns == 1) {
            dst_o = &out.out[(size_t(b) * rows + row) * p.d_v];
            dst_lse = &out.lse[size_t(b) * rows + row];
          } else {
            const size_t slot = size_t(plan.first_slot[b]) + w.split;
            dst_o = &part_o[(slot * rows + row) * p.d_v];
            dst_lse = &part_lse[slot * rows + row];
          }
          std::copy_n(&o_tmp[size_t(h - h0) * p.d_v], p.d_v, dst_o);
          *dst_lse = lse_tmp[h - h0];
        }
        r += h1 - h0;
      }
    }
  }
  // Combine: every row of a split request, rows with no visible key written directly.
  std::vector<double> lses;
  std::vector<const double*> os;
  for (int b = 0; b < p.batch; ++b) {
    const int ns = plan.num_splits[b];
    if (ns <= 1) continue;
    for (int row = 0; row < rows; ++row) {
      double* dst_o = &out.out[(size_t(b) * rows + row) * p.d_v];
      double* dst_lse = &out.lse[size_t(b) * rows + row];
      if (visible_keys(p, in.seqlens[b], row / p.heads) <= 0) {
        std::fill(dst_o, dst_o + p.d_v, 0.0);
        *dst_lse = kNegInf;
        continue;
      }
      lses.clear();
      os.clear();
      for (int sp = 0; sp < ns; ++sp) {
        const size_t slot = size_t(plan.first_slot[b]) + sp;
        lses.push_back(part_lse[slot * rows + row]);
        os.push_back(&part_o[(slot * rows + row) * p.d_v]);
      }
      combine_row(lses, os, p.d_v, dst_o, dst_lse);
    }
  }
  for (int32_t entry : plan.zero_fill) {
    const int tile_batch = work_entry_tile_batch(entry);
    const int t = tile_batch / p.batch, b = tile_batch % p.batch;
    for (int row = t * s.tile_rows; row < std::min(rows, (t + 1) * s.tile_rows); ++row) {
      std::fill_n(&out.out[(size_t(b) * rows + row) * p.d_v], p.d_v, 0.0);
      out.lse[size_t(b) * rows + row] = kNegInf;
    }
  }
  return out;
}

Comparison compare(const Problem& p, const Outputs& ref, std::span<const double> out, std::span<const double> lse) {
  require(out.size() == ref.out.size() && lse.size() == ref.lse.size(), "compare: size mismatch (out ",
          out.size(), " vs ", ref.out.size(), ", lse ", lse.size(), " vs ", ref.lse.size(), ")");
  Comparison c{0, 0, 0, false, false};
  double err2 = 0, ref2 = 0;
  const size_t rows = ref.lse.size();
  for (size_t r = 0; r < rows; ++r) {
    double row_err2 = 0, row_ref2 = 0;
    for (int d = 0; d < p.d_v; ++d) {
      const double x = out[r * p.d_v + d], y = ref.out[r * p.d_v + d];
      if (std::isnan(x)) c.any_nan = true;
      row_err2 += (x - y) * (x - y);
      row_ref2 += y * y;
    }
    err2 += row_err2;
    ref2 += row_ref2;
    c.worst_row_rel = std::max(c.worst_row_rel, std::sqrt(row_err2) / std::max(std::sqrt(row_ref2), 1e-30));
    if (std::isnan(lse[r])) c.any_nan = true;
    const bool ref_inf = std::isinf(ref.lse[r]), out_inf = std::isinf(lse[r]);
    if (ref_inf != out_inf) {
      c.infinite_lse_mismatch = true;
    } else if (!ref_inf) {
      c.lse_max_abs = std::max(c.lse_max_abs, std::abs(lse[r] - ref.lse[r]));
    }
  }
  c.rel_frobenius = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (c.any_nan) c.rel_frobenius = c.worst_row_rel = std::numeric_limits<double>::infinity();
  return c;
}

#define KBMLA_INSTANTIATE_REFERENCE(T)                                                                          \
  template void validate<T>(const Problem&, const Inputs<T>&);                                                \
  template void attend<T>(const Problem&, const Inputs<T>&, int, int, int, int, int, int, double*, double*); \
  template Outputs reference_decode<T>(const Problem&, const Inputs<T>&);                                     \
  template Outputs emulate_split_decode<T>(const Problem&, const Inputs<T>&, const HostPlan&);
KBMLA_INSTANTIATE_REFERENCE(float)
KBMLA_INSTANTIATE_REFERENCE(Bf16)
#undef KBMLA_INSTANTIATE_REFERENCE

}  // namespace kbmla::ref
