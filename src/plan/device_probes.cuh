// The device planner's block-level machinery (one CTA, a warp per cap probe): the probes'
// step records, a search round over the warps (BlockProbes) and the warp-wide search
// of the slot walk (WarpSearch). Included by device_planner.cu only (an unnamed
// namespace: these stay internal to its translation unit, as before the split).
#pragma once

#include <climits>
#include <cstring>

#include "kbmla/planner_search.hpp"
#include "src/plan/slot_walk.hpp"

// Phase timestamps for a tracing build (the harness that defines KBMLA_PLANNER_TRACE
// provides kbmla_planner_stamp, called by thread 0 at each phase's end).
#ifdef KBMLA_PLANNER_TRACE
#define KBMLA_PLANNER_STAMP() kbmla_planner_stamp()
#else
#define KBMLA_PLANNER_STAMP() \
  do {                        \
  } while (0)
#endif

namespace kbmla {
namespace {

using plan_detail::RequestTerms;

// One warp per probe, and one more for the extra fill of first_fitting_with.
constexpr int kPlannerWarps = kCapProbes + 1;
constexpr int kPlannerThreads = kPlannerWarps * 32;
static_assert(kPlannerThreads <= 1024, "one warp per probe in one CTA");
static_assert(sizeof(RequestTerms) == 64, "the staged batch size assumes 64-byte terms");

// The probes' records of where their slots start: a cut-form walk's steps (CutStep), a
// whole-form fill's or walk's first unit of each slot (int32). After each round the
// fitting record with the least cap so far is kept for each form, and the plan, whose cap
// is its form's least fitting one probed, is then written from it in parallel (request by
// request, unit by unit).
struct StepRecords {
  plan_detail::CutStep* per_warp;  // kPlannerWarps x stride (a whole-form record: int32s)
  plan_detail::CutStep* kept[2];   // stride each: [0] cut form, [1] whole form
  int* num_steps;                  // kPlannerWarps: the warp's record's length, or -1 (none, or its fill failed)
  int64_t* kept_cap;               // [2]: the kept record's cap (INT64_MAX: none)
  int* kept_steps;                 // [2]
  int stride;                      // G + 1 (every walk's steps fit)
};

// The K probes of a search round, one per warp: all 32 lanes of warp i evaluate probe i
// (the slot walk's search uses them; fill() runs on every lane alike, which costs the warp
// no more issue slots than one lane would), lane 0 stores the verdict and counts, the
// lowest warp that fits wins. Every thread keeps the same search state, so all call this
// the same number of times.
struct BlockProbes {
  int* verdict;         // shared, kPlannerWarps entries
  PlanCounts* counted;  // shared, kPlannerWarps entries: each probe's counts
  uint8_t* scratch;     // shared, kScratchBytes, 16-byte aligned: single()'s result
  const StepRecords* records;  // null: none kept
  static constexpr int kScratchBytes = 128;

  // Between a round's two barriers: for each form, the least-cap fitting record of the
  // warps that filled goes to its `kept` (all threads copy); thread 0 notes them after the
  // second barrier.
  __device__ void keep_best_records(bool extra_ran, int64_t (&cap)[2], int (&steps)[2]) const {
    int best[2] = {-1, -1};
    for (int f = 0; f < 2; ++f) cap[f] = records->kept_cap[f];
    for (int w = 0; w < kPlannerWarps; ++w) {
      const bool ran = w < kCapProbes || extra_ran;
      const int f = counted[w].whole_requests ? 1 : 0;
      if (ran && verdict[w] && records->num_steps[w] >= 0 && counted[w].cap < cap[f]) {
        cap[f] = counted[w].cap;
        best[f] = w;
      }
    }
    for (int f = 0; f < 2; ++f) {
      // (A record holds at most G + 1 entries, the stride: min() only keeps the copy in bounds.)
      steps[f] = best[f] >= 0 ? min(records->num_steps[best[f]], records->stride) : -1;
      if (best[f] < 0) continue;
      const plan_detail::CutStep* from = records->per_warp + best[f] * records->stride;
      if (f == 0) {
        for (int i = threadIdx.x; i < steps[f]; i += blockDim.x) records->kept[0][i] = from[i];
      } else {
        auto* to = reinterpret_cast<int32_t*>(records->kept[1]);
        for (int i = threadIdx.x; i < steps[f]; i += blockDim.x) to[i] = reinterpret_cast<const int32_t*>(from)[i];
      }
    }
  }

  // Thread 0 runs the sequential steps (the total) alone: with every warp running them, one
  // copy of a dependent chain per warp shared the SM's four schedulers.
  template <class F>
  __device__ auto single(F&& f) const {
    using T = decltype(f());
    static_assert(sizeof(T) <= kScratchBytes, "single(): result too large for the scratch");
    if (threadIdx.x == 0) {
      const T v = f();
      memcpy(scratch, &v, sizeof(T));
      KBMLA_PLANNER_STAMP();
    }
    __syncthreads();
    T v;
    memcpy(&v, scratch, sizeof(T));
    __syncthreads();
    return v;
  }

  // extra_cap >= 0: warp kCapProbes fills at it in the same round (the tight bound, the
  // whole form's limit: a pass fewer on the planner's critical path than a fill of its own).
  template <class Fits>
  __device__ int round(const CapSearch& s, Fits& fits, int64_t extra_cap, PlanCounts& winner, bool* extra_fits,
                       PlanCounts* extra) const {
    const int warp = int(threadIdx.x / 32);
    const bool lead = threadIdx.x % 32 == 0;
    if (warp < kCapProbes || extra_cap >= 0) {
      PlanCounts mine{};
      const bool ok = fits(warp < kCapProbes ? s.probe(warp) : extra_cap, mine);
      if (lead) {
        verdict[warp] = ok ? 1 : 0;
        counted[warp] = mine;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) KBMLA_PLANNER_STAMP();
    int first = kCapProbes;
    for (int i = kCapProbes - 1; i >= 0; --i) {
      if (verdict[i]) first = i;
    }
    if (first < kCapProbes) winner = counted[first];
    if (extra_fits != nullptr) {
      *extra_fits = verdict[kCapProbes] != 0;
      *extra = counted[kCapProbes];
    }
    int64_t kept_cap[2] = {0, 0};
    int kept_steps[2] = {-1, -1};
    if (records != nullptr) keep_best_records(extra_cap >= 0, kept_cap, kept_steps);
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int f = 0; f < 2; ++f) {
        if (kept_steps[f] < 0) continue;
        records->kept_cap[f] = kept_cap[f];
        records->kept_steps[f] = kept_steps[f];
      }
    }
    return first;
  }
  template <class Fits>
  __device__ int first_fitting(const CapSearch& s, Fits& fits, PlanCounts& winner) const {
    return round(s, fits, -1, winner, nullptr, nullptr);
  }
  template <class Fits>
  __device__ int first_fitting_with(const CapSearch& s, Fits& fits, int64_t extra_cap, RoundWhen, bool& extra_fits,
                                    PlanCounts& extra, PlanCounts& winner) const {
    return round(s, fits, extra_cap, winner, &extra_fits, &extra);
  }
};

// The slot walk's search on the device: the largest j in [lo, hi] with at(j) <= x (at()
// nondecreasing, at(lo) <= x), 32 candidates per step, one per lane; the lanes that fit
// are a prefix, so their count is the next bracket. Up to 32 requests in one step, 1024 in
// two. Every lane returns the same j.
struct WarpSearch {
  static constexpr int kScalarProbes = 4;
  template <class At>
  __device__ int last_at_most(int lo, int hi, int64_t x, const At& at) const {
    const int lane = int(threadIdx.x % 32);
    // Most runs are short where the batch is about one request a slot: a few compares first,
    // each cheaper than a ballot round (measured, H200: none -> two, uniform B128 Sq4 replans
    // 278 -> 231 us, lognormal B128 Sq4 250 -> 239; four, 232 and 232; eight, no better).
    // Their loads are issued together (indices clamped to hi, which is in bounds; a value
    // past hi is never compared), so the compares wait for one shared-memory round trip
    // instead of one each: replans 1-4 % faster on every traced batch (two alternated
    // runs, H200, bench/results/logs-v45/scalar-probes; two or eight such compares: mixed).
    int64_t next[kScalarProbes];
#pragma unroll
    for (int k = 0; k < kScalarProbes; ++k) next[k] = at(min(lo + 1 + k, hi));
#pragma unroll
    for (int k = 0; k < kScalarProbes; ++k) {
      if (lo == hi || next[k] > x) return lo;
      ++lo;
    }
    while (lo < hi) {
      const int step = (hi - lo + 31) / 32;
      const int idx = min(lo + (lane + 1) * step, hi);
      const int k = __popc(__ballot_sync(0xffffffffu, at(idx) <= x));
      const int next_hi = k < 32 ? min(lo + (k + 1) * step, hi) - 1 : hi;
      if (k > 0) lo = min(lo + k * step, hi);
      hi = next_hi;
    }
    return lo;
  }
};

}  // namespace
}  // namespace kbmla
