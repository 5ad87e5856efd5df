// The planner's cap search and its passes over the batch (planner_core.hpp has the model
// and the fill): plan_measure finds the least cap that fits and counts every output,
// plan_write writes the plan into caller buffers. Host and device run this same code.
#pragma once

#include <climits>
#include <cstdint>

#include "kbmla/hd.hpp"
#include "kbmla/planner_core.hpp"

namespace kbmla {

// The smallest cap is found by a K-ary search whose K probes per round depend only on
// the search state: the host evaluates them in order and stops at the first that fits,
// the device planner evaluates all K at once (one per warp) and takes the lowest that
// fits. Same probes, same answer, so both write the same bytes; the device needs a few
// rounds of one fill each instead of ~25 sequential bisection steps.
constexpr int kCapProbes = 16;

struct CapSearch {
  int64_t low;         // a cap known not to fit (or the overhead-free bound minus one)
  int64_t high = 0;    // the smallest cap known to fit, once found
  int64_t step;        // growth of the probes before a fitting cap is found
  int64_t skip = 0;    // before a fitting cap is found: the probes start this far above low
  int64_t coarse = 0;  // > 0: the first `below` probes, and those after the next `fine`, this far apart
  int below = 0;
  int fine = kCapProbes;
  bool found = false;

  KBMLA_HD int64_t probe(int i) const {
    if (!found) {
      const int64_t start = low + skip;
      if (i < below) return start - coarse * (below - i);
      if (i < below + fine) return start + step * (i - below + 1);
      return start + step * fine + coarse * (i - below - fine + 1);
    }
    return low + (high - low) * (i + 1) / (kCapProbes + 1);
  }
  // Finished when the bracket is within 1/256 of the cap (at most ~0.4 % of one slot's
  // time above the least cap that fits), which spares the device planner's narrowing
  // rounds, each a full sequential fill.
  KBMLA_HD bool done() const { return found && high - low <= (low >> 8) + 1; }
  // `first`: the lowest probe index that fits, kCapProbes when none does.
  KBMLA_HD void update(int first) {
    if (first < kCapProbes) {
      const int64_t h = probe(first);
      const int64_t l = first > 0 ? probe(first - 1) : low;
      high = h;
      low = l;
      found = true;
    } else {
      // (The last probe becomes low before the grid changes: probe() reads the grid.)
      const int64_t last = probe(kCapProbes - 1);
      if (!found) step = (fine < kCapProbes ? coarse : step) * kCapProbes;
      low = last;
      skip = 0;
      below = 0;
      fine = kCapProbes;
    }
  }
};

// Which results of first_fitting_with the caller uses: the round's only if the extra
// fill fits, only if it does not, or never (the round is then a speculation the device
// planner makes for free and the host skips).
enum RoundWhen : int { kRoundIfExtraFits, kRoundIfExtraFails, kRoundNever };

// Pass 1 + 2: finds the cap and counts every output. Shapes must be valid (the host
// checks them); seqlens are data and are checked here. The executor `ex` provides
//   ex.first_fitting(search, fits, winner): the lowest probe index i with
//                 fits(search.probe(i), counts), or kCapProbes; winner: that fill's counts;
//   ex.first_fitting_with(search, fits, extra_cap, when, extra_fits, extra,
//                 winner): the fill at extra_cap too (SequentialProbes says which results
//                 the caller may use);
//   ex.single(f): f() evaluated once and its value returned to every caller (the device
//                 planner runs this function on every thread of its CTA; one thread does
//                 the sequential steps instead of every warp competing for issue slots).
struct TotalCost {
  int64_t total;
  int bad_index;           // first request with a negative seqlen, or -1
  int64_t max_tile_cost;   // the largest q tile unit of the whole form (tile_cost of a request with work)
};

// The cap search and the counts of the fill at the least fitting cap, given the batch's
// total whole cost and its largest whole-form unit (no negative seqlen). `fill_counts(cap, whole, counts)` runs one fill of
// either form at `cap` into `counts` (which arrive holding the fields a count starts from)
// and says whether everything fits: plan_measure_requests passes fill() with a CountSink;
// the device planner passes its slot walk, which counts the same (slot_walk.hpp).
template <class Executor, class FillCounts>
KBMLA_HD PlanCounts plan_search(const PlanShape& p, int64_t total, int64_t max_tile_cost, Executor&& ex,
                                FillCounts&& fill_counts) {
  using namespace plan_detail;
  PlanCounts counts;
  counts.num_q_tiles = ceil_div(p.heads * p.q_len, p.tile_rows);
  counts.num_clusters = p.num_ctas / p.cluster_size;
  const int G = counts.num_clusters;
  const int T = counts.num_q_tiles;
  // A probe fills at its cap and counts, so the counts of the least fitting cap come from
  // its probe, not from another pass. `base`: the fields a count starts from.
  PlanCounts base = counts;
  auto counted = [&](bool whole) {
    return [&, whole](int64_t cap, PlanCounts& c) {
      // Counted in a local (registers on the device; `c` is shared memory there), stored once.
      PlanCounts local = base;
      local.cap = cap;
      local.whole_requests = whole;
      const bool ok = fill_counts(cap, whole, local);
      c = local;
      return ok;
    };
  };
  // One round's answer applied to a search, and the counts kept where its high moved; then
  // the rounds until the search is done.
  auto take = [](CapSearch& sr, int first, const PlanCounts& round, PlanCounts& at) {
    sr.update(first);
    if (first < kCapProbes) at = round;
  };
  auto finish = [&](CapSearch& sr, auto& fits_at, PlanCounts& at) {
    while (!sr.done()) {
      PlanCounts round{};
      take(sr, ex.first_fitting(sr, fits_at, round), round, at);
    }
  };
  // The plan's counts from the chosen fill's: the list's length follows the slots.
  auto finish_counts = [&](PlanCounts c) {
    if (p.fixed_grid) c.num_active_clusters = G;
    const int64_t len = int64_t{c.num_active_clusters} * (c.max_items_per_cluster + 1);
    if (len > INT32_MAX) {
      c.status = kPlanListTooLong;
      return c;
    }
    c.work_list_len = static_cast<int>(len);
    return c;
  };
  auto fits = counted(false);
  auto fits_whole = counted(true);
  // Caps of the forms' bounds. Below the overhead-free bound c0 = total / G nothing fits; a
  // cut-form cap is at least c0, so the whole form's limit (that cap + 1/16) is at least
  // limit0 = c0 + c0 / 16. The whole form also needs its largest q tile unit within one slot.
  int64_t c0 = ceil_div64(total, G);
  if (c0 < 1) c0 = 1;
  const int64_t limit0 = c0 + c0 / 16;
  const int64_t whole_floor = max_tile_cost > c0 ? max_tile_cost : c0;
  const bool whole_allowed = p.fixed_split_blocks == 0;  // (never for batch-invariant plans)
  // The whole form's search between a cap known not to fit (below its floor) and `high`,
  // known to fit: its first round runs beside the fill at `high`, which decides whether the
  // form is taken (the device evaluates both at once). Returns whether it was.
  auto search_whole = [&](int64_t high, PlanCounts& at) {
    CapSearch whole;
    whole.low = whole_floor - 1;
    whole.high = high;
    whole.step = 1;
    whole.found = true;
    PlanCounts at_limit{}, round{};
    bool limit_fits = false;
    const bool searching = !whole.done();
    const int first = ex.first_fitting_with(whole, fits_whole, high, searching ? kRoundIfExtraFits : kRoundNever,
                                            limit_fits, at_limit, round);
    if (!limit_fits) return false;
    at = at_limit;
    if (searching) take(whole, first, round, at);
    finish(whole, fits_whole, at);
    return true;
  };
  // Whole requests first where they may fit at limit0: then they fit at every limit the cut
  // form could give, so the form is taken whatever the cut form's cap, and its search is
  // the whole plan: one round (its bracket, at most c0 / 16 wide, is within 1/256 after
  // it) where the cut form's search took two or three and the whole form's two more
  // (uniform batches: B128 Sq4 four rounds, H128 Sq2 three). Where they do not fit there,
  // one round more than the cut form alone (a batch of units that do not pack).
  bool limit0_failed = false;
  if (whole_allowed && max_tile_cost > 0 && max_tile_cost <= limit0) {
    PlanCounts at_whole{};
    if (search_whole(limit0, at_whole)) return finish_counts(at_whole);
    limit0_failed = true;
  }
  CapSearch search;
  search.low = c0 - 1;  // below the overhead-free bound nothing fits
  // The first round's probes: at s1 = T (per_item + per_split + per_kv_block) / 16 apart
  // (a cut's overheads per slot over 16), from 9 s1 to 24 s1 above the bound. Over the cut
  // plans of 5,000 random configurations (bench/planner_rounds.cpp, bench/NOTES.md v45),
  // planned by the earlier search, the least cap lay 9-24 s1 above the bound in 88 % (12-18
  // s1 in 80 %, none below 9), where probes from s1 to 16 s1 missed 36 % and then took two
  // rounds more; the spacing stays s1, so a search that ended in one round still does.
  // Rounds (with the whole form first): 9,965 with probes 1.5 s1 apart from the bound,
  // 9,330 so (14,133 before both changes); no verdict and no cap more than 0.4 % worse
  // than the earlier search's (the cut form's fits are not monotone in the cap, so another
  // probe grid can land on another fitting cap: two caps came out 0.5-6 % lower).
  search.step = int64_t{T} * (p.cost.per_item + p.cost.per_split + p.cost.per_kv_block) / kCapProbes + 1;
  search.skip = 8 * search.step;
  // Where probes s1 apart leave a bracket wider than done()'s precision (small batches
  // against T x overheads: a second round always followed), the first round probes 12 caps
  // that far apart centred on 14 s1 (where the cut form's least caps gather) and two s1
  // apart below and two above them: one round where the cap falls among the 12. Rounds
  // over the 5,000 random configurations 9,330 -> 8,434 (up in 23, down in 920), the cases
  // file 133 -> 107 (skew, B1, B4_Sq4, kimi_lognormal 2 -> 1 with every cost model; none
  // up); all verdicts equal but two (both at the 1/16 rule's edge: now the whole form, its
  // cap 6.4 % above the cut form's before), no other cap moved by more than 0.4 %.
  const int64_t precision = (search.low >> 8) + 1;  // done()'s bracket at this low
  if (precision < search.step) {
    search.coarse = search.step;
    search.below = 2;
    search.fine = 12;
    search.skip = 14 * search.coarse - 6 * precision;
    search.step = precision;
  }
  PlanCounts at_high{};  // the counts of the fill at search.high
  {
    // A tight bound decides alone when it fits; else the search's first round, which the
    // device planner evaluates beside it.
    PlanCounts tight{}, round{};
    bool tight_fits = false;
    const int first = ex.first_fitting_with(search, fits, search.low + 1, kRoundIfExtraFails, tight_fits, tight, round);
    if (tight_fits) {
      search.high = search.low + 1;
      search.found = true;
      at_high = tight;
    } else {
      take(search, first, round, at_high);
    }
  }
  finish(search, fits, at_high);
  // Whole requests with their q tiles spread (see fill), if some cap within 1/16 of the
  // least cap with cuts fits them: then the least such cap, found the same way. Measured
  // (bench/NOTES.md, v6-v8): on uniform batches static split 1, which is this form, was
  // level with or up to 8 % ahead of the plan with cuts, whose modelled gain was ~3 %.
  // (A unit above the limit fails that fill and every probe below it, as does a limit of
  // limit0 that already failed: the same verdict without the round.)
  const int64_t limit = search.high + search.high / 16;
  if (whole_allowed && max_tile_cost <= limit && !(limit0_failed && limit == limit0)) {
    PlanCounts at_whole{};
    if (search_whole(limit, at_whole)) at_high = at_whole;
  }
  return finish_counts(at_high);
}

// `reqs` (plan_detail::SeqlenRequests or StagedRequests): the batch's seqlens and terms.
template <class Executor, class Requests>
KBMLA_HD PlanCounts plan_measure_requests(const PlanShape& p, const Requests& reqs, Executor&& ex) {
  using namespace plan_detail;
  const TotalCost tc = ex.single([&] {
    TotalCost t{0, -1, 0};
    for (int b = 0; b < p.batch; ++b) {
      if (reqs.seqlen(b) < 0) {
        t.bad_index = b;
        return t;
      }
      const RequestTerms q = reqs.terms(b);
      t.total += q.whole;
      if (q.r.blocks > 0 && q.r.tiles > 0 && q.tile_cost > t.max_tile_cost) t.max_tile_cost = q.tile_cost;
    }
    return t;
  });
  if (tc.bad_index >= 0) {
    PlanCounts counts;
    counts.num_q_tiles = ceil_div(p.heads * p.q_len, p.tile_rows);
    counts.num_clusters = p.num_ctas / p.cluster_size;
    counts.status = kPlanNegativeSeqlen;
    counts.bad_index = tc.bad_index;
    return counts;
  }
  const int T = ceil_div(p.heads * p.q_len, p.tile_rows);
  const int G = p.num_ctas / p.cluster_size;
  return plan_search(p, tc.total, tc.max_tile_cost, ex, [&](int64_t cap, bool whole, PlanCounts& local) {
    CountSink count_sink(&local);
    return fill(p, reqs, T, G, cap, whole, count_sink);
  });
}

template <class Executor>
KBMLA_HD PlanCounts plan_measure_with(const PlanShape& p, const int32_t* seqlens, Executor&& ex) {
  const plan_detail::SeqlenRequests reqs{&p, seqlens, plan_detail::ceil_div(p.heads * p.q_len, p.tile_rows)};
  return plan_measure_requests(p, reqs, ex);
}

// The host's executor: probes in order, single steps inline.
struct SequentialProbes {
  // fits(cap, counts): whether the requests fit at cap, with counts of that fill.
  template <class Fits>
  KBMLA_HD int first_fitting(const CapSearch& s, Fits& fits, PlanCounts& winner) const {
    for (int i = 0; i < kCapProbes; ++i) {
      if (fits(s.probe(i), winner)) return i;
    }
    return kCapProbes;
  }
  // The same, and the fill at extra_cap first; the round is evaluated only where `when`
  // says the caller uses it (the device evaluates both at once).
  template <class Fits>
  KBMLA_HD int first_fitting_with(const CapSearch& s, Fits& fits, int64_t extra_cap, RoundWhen when,
                                  bool& extra_fits, PlanCounts& extra, PlanCounts& winner) const {
    extra_fits = fits(extra_cap, extra);
    const bool used = when == kRoundIfExtraFits ? extra_fits : when == kRoundIfExtraFails ? !extra_fits : false;
    return used ? first_fitting(s, fits, winner) : kCapProbes;
  }
  template <class F>
  KBMLA_HD auto single(F&& f) const {
    return f();
  }
};

// SequentialProbes that also counts the rounds the device planner runs one after another
// (one per first_fitting and per first_fitting_with): the tests' and tools' measure of a
// search's length.
struct RoundCountingProbes {
  int* rounds;
  template <class Fits>
  KBMLA_HD int first_fitting(const CapSearch& s, Fits& fits, PlanCounts& winner) const {
    ++*rounds;
    return SequentialProbes{}.first_fitting(s, fits, winner);
  }
  template <class Fits>
  KBMLA_HD int first_fitting_with(const CapSearch& s, Fits& fits, int64_t extra_cap, RoundWhen when,
                                  bool& extra_fits, PlanCounts& extra, PlanCounts& winner) const {
    ++*rounds;
    return SequentialProbes{}.first_fitting_with(s, fits, extra_cap, when, extra_fits, extra, winner);
  }
  template <class F>
  KBMLA_HD auto single(F&& f) const {
    return f();
  }
};

KBMLA_HD_NOINLINE inline PlanCounts plan_measure(const PlanShape& p, const int32_t* seqlens) {
  return plan_measure_with(p, seqlens, SequentialProbes{});
}

// Pass 3: writes the plan into caller buffers sized from `counts`.
template <class Requests>
KBMLA_HD int plan_write_requests(const PlanShape& p, const Requests& reqs, const PlanCounts& counts,
                                 PlanBuffers& out) {
  using namespace plan_detail;
  if (counts.status != kPlanOk) return counts.status;
  if (out.work_list_capacity < counts.work_list_len || out.bounds_capacity < counts.num_bounds ||
      out.zero_fill_capacity < counts.num_zero_fill) {
    return kPlanCapacityTooSmall;
  }
  for (int i = 0; i < counts.work_list_len; ++i) out.work_list[i] = kNoWork;
  if (out.cluster_cost != nullptr) {
    for (int g = 0; g < counts.num_clusters; ++g) out.cluster_cost[g] = 0;
  }
  WriteSink sink{&p, &counts, &out};
  fill(p, reqs, counts.num_q_tiles, counts.num_clusters, counts.cap, counts.whole_requests, sink);
  return kPlanOk;
}

KBMLA_HD_NOINLINE inline int plan_write(const PlanShape& p, const int32_t* seqlens, const PlanCounts& counts,
                                        PlanBuffers& out) {
  const plan_detail::SeqlenRequests reqs{&p, seqlens, counts.num_q_tiles};
  return plan_write_requests(p, reqs, counts, out);
}

}  // namespace kbmla
