// The device planner's time by phase, on synthetic batches shaped like the public cases,
// and its bytes against the host planner's (plan_measure + plan_write). A tracing build of
// src/plan/device_planner.cu (KBMLA_PLANNER_TRACE): thread 0 stamps %globaltimer at each
// phase's end (staging, prefix sums, each search round, the write, the header).
// Build (from the repository root):
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -I. -Iinclude \
//        --expt-relaxed-constexpr -cudart static -o build-alt/planner_trace bench/planner_trace.cu
// Run: planner_trace [CASE [once]] (once: one launch, for ncu).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#define KBMLA_PLANNER_TRACE 1
__device__ unsigned long long g_stamps[256];
__device__ int g_nstamp;
__device__ void kbmla_planner_stamp() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  int n = g_nstamp;
  if (n < 256) g_stamps[n] = t;
  g_nstamp = n + 1;
}
#include "src/plan/device_planner.cu"
using namespace kbmla;
#define CK(x)                                                     \
  do {                                                            \
    cudaError_t e = (x);                                          \
    if (e) {                                                      \
      printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); \
      exit(1);                                                    \
    }                                                             \
  } while (0)
struct Case {
  const char* name;
  int batch, q_len, heads, cluster;
  CostModel cost;
  std::vector<int32_t> seq;
};
int main(int argc, char** argv) {
  std::vector<Case> cases;
  auto uni = [](int b, int L) { return std::vector<int32_t>(b, L); };
  std::mt19937_64 rng(7);
  auto logn = [&](int b, double mu, double sg) {
    std::lognormal_distribution<double> d(mu, sg);
    std::vector<int32_t> v(b);
    for (auto& x : v) x = std::min<int>(131072, std::max<int>(1, int(d(rng))));
    return v;
  };
  cases.push_back({"B1_L131072_Sq1", 1, 1, 16, 1, sm90_bf16_cost_model(16), uni(1, 131072)});
  cases.push_back({"B4_L131072_Sq1", 4, 1, 16, 1, sm90_bf16_cost_model(16), uni(4, 131072)});
  cases.push_back({"B1_L1M_Sq4", 1, 4, 16, 1, sm90_bf16_cost_model(64), uni(1, 1 << 20)});
  {
    auto v = uni(128, 1024);
    v[0] = 131072;
    cases.push_back({"skew_Sq1", 128, 1, 16, 1, sm90_bf16_cost_model(16), v});
  }
  cases.push_back({"B64_L32768_Sq1", 64, 1, 16, 1, sm90_bf16_cost_model(16), uni(64, 32768)});
  cases.push_back({"B128_L4096_Sq4", 128, 4, 16, 1, sm90_bf16_cost_model(64), uni(128, 4096)});
  cases.push_back({"logn_B128_Sq4", 128, 4, 16, 1, sm90_bf16_cost_model(64), logn(128, 8.0, 1.2)});
  cases.push_back({"H128_Sq2_B128", 128, 2, 128, 2, sm90_bf16_cost_model(256), uni(128, 4096)});
  cases.push_back({"logn_B512_Sq1", 512, 1, 16, 1, sm90_bf16_cost_model(16), logn(512, 7.5, 1.5)});
  cases.push_back({"logn_B16_Sq4", 16, 4, 16, 1, sm90_bf16_cost_model(64), logn(16, 9.0, 1.2)});
  cases.push_back({"logn_B32_Sq1", 32, 1, 16, 1, sm90_bf16_cost_model(16), logn(32, 9.0, 1.2)});
  cases.push_back({"logn_B1700_Sq1", 1700, 1, 16, 1, sm90_bf16_cost_model(16), logn(1700, 6.5, 1.5)});
  cases.push_back({"logn_B2048_Sq1", 2048, 1, 16, 1, sm90_bf16_cost_model(16), logn(2048, 6.5, 1.5)});
  cases.push_back({"logn_B2300_Sq1", 2300, 1, 16, 1, sm90_bf16_cost_model(16), logn(2300, 6.5, 1.5)});
  cases.push_back({"logn_B3000_Sq1", 3000, 1, 16, 1, sm90_bf16_cost_model(16), logn(3000, 6.5, 1.5)});
  cases.push_back({"logn_B4096_Sq4", 4096, 4, 16, 1, sm90_bf16_cost_model(64), logn(4096, 6.5, 1.5)});
  cases.push_back({"uni_B8192_L2048_Sq1", 8192, 1, 16, 1, sm90_bf16_cost_model(16), uni(8192, 2048)});
  cases.push_back({"logn_B16384_Sq1", 16384, 1, 16, 1, sm90_bf16_cost_model(16), logn(16384, 6.5, 1.5)});
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (auto& c : cases) {
    if (argc > 1 && std::string(argv[1]) != c.name) continue;
    PlanShape s;
    s.batch = c.batch;
    s.q_len = c.q_len;
    s.heads = c.heads;
    s.causal = true;
    s.cluster_size = c.cluster;
    s.tile_rows = 64 * c.cluster;
    s.kv_block = 64;
    s.num_ctas = 132;
    s.cost = c.cost;
    s.fixed_grid = true;
    const int G = 132 / c.cluster, T = (c.heads * c.q_len + s.tile_rows - 1) / s.tile_rows;
    const long wl = long(G) * (T * c.batch + 1), nb = 2L * c.batch + G - 1, zf = long(T) * c.batch;
    int32_t *d_seq, *d_wl, *d_ns, *d_fs, *d_bo, *d_b, *d_zf, *d_sr;
    DevicePlanHeader* d_h;
    CK(cudaMalloc(&d_seq, 4 * c.batch));
    CK(cudaMalloc(&d_wl, 4 * wl));
    CK(cudaMalloc(&d_ns, 4 * c.batch));
    CK(cudaMalloc(&d_fs, 4 * c.batch));
    CK(cudaMalloc(&d_bo, 4 * c.batch));
    CK(cudaMalloc(&d_b, 4 * nb));
    CK(cudaMalloc(&d_zf, 4 * zf + 4));
    CK(cudaMalloc(&d_sr, 4 * G));
    CK(cudaMalloc(&d_h, sizeof(DevicePlanHeader)));
    CK(cudaMemcpy(d_seq, c.seq.data(), 4 * c.batch, cudaMemcpyHostToDevice));
    DevicePlanBuffers o{d_h, PlanBuffers{d_wl, int(wl), d_ns, d_fs, d_bo, d_b, int(nb), d_zf, int(zf), nullptr}, d_sr,
                        G - 1};
    const size_t scratch_bytes = device_planner_scratch_bytes(s);
    if (scratch_bytes > 0) CK(cudaMalloc(&o.scratch, scratch_bytes));
    std::vector<float> ts;
    for (int r = 0; r < (argc > 2 ? 1 : 30); ++r) {
      int zero = 0;
      CK(cudaMemcpyToSymbol(g_nstamp, &zero, 4));
      cudaEventRecord(e0, st);
      launch_device_planner(s, d_seq, o, st);
      cudaEventRecord(e1, st);
      CK(cudaEventSynchronize(e1));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      ts.push_back(ms * 1000);
    }
    std::sort(ts.begin(), ts.end());
    int n;
    unsigned long long stamps[256];
    CK(cudaMemcpyFromSymbol(&n, g_nstamp, 4));
    CK(cudaMemcpyFromSymbol(stamps, g_stamps, sizeof stamps));
    // host reference
    PlanCounts hc = plan_measure(s, c.seq.data());
    std::vector<int32_t> hwl(hc.work_list_len), hns(c.batch), hfs(c.batch), hbo(c.batch), hb(hc.num_bounds + 1),
        hzf(hc.num_zero_fill + 1);
    PlanBuffers hb_{hwl.data(), int(hwl.size()), hns.data(), hfs.data(),      hbo.data(),
                    hb.data(),  int(hb.size()),  hzf.data(), int(hzf.size()), nullptr};
    int hs = plan_write(s, c.seq.data(), hc, hb_);
    std::vector<int32_t> gwl(hc.work_list_len), gns(c.batch), gfs(c.batch), gbo(c.batch), gb(hc.num_bounds),
        gzf(hc.num_zero_fill);
    DevicePlanHeader gh;
    CK(cudaMemcpy(&gh, d_h, sizeof gh, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gwl.data(), d_wl, 4 * gwl.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gns.data(), d_ns, 4 * c.batch, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gfs.data(), d_fs, 4 * c.batch, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gbo.data(), d_bo, 4 * c.batch, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gb.data(), d_b, 4 * gb.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gzf.data(), d_zf, 4 * gzf.size(), cudaMemcpyDeviceToHost));
    bool same = hs == 0 && gh.status == 0 && gh.num_items == hc.num_items && gh.num_slots == hc.num_slots &&
                gwl == hwl && gns == hns && gfs == hfs && gbo == hbo && std::equal(gb.begin(), gb.end(), hb.begin()) &&
                std::equal(gzf.begin(), gzf.end(), hzf.begin());
    printf("%-16s B=%4d T=%d G=%d whole=%d cap=%lld items=%d  event med %.1f us min %.1f  %s\n  phases(us):", c.name,
           c.batch, T, G, int(hc.whole_requests), (long long)hc.cap, hc.num_items, ts[ts.size() / 2], ts[0],
           same ? "SAME" : "DIFFERENT");
    for (int i = 1; i < n && i < 256; ++i) printf(" %.2f", (stamps[i] - stamps[i - 1]) / 1000.0);
    printf("  | total %.2f\n", (stamps[n - 1] - stamps[0]) / 1000.0);
    cudaFree(d_seq);
    cudaFree(d_wl);
    cudaFree(d_ns);
    cudaFree(d_fs);
    cudaFree(d_bo);
    cudaFree(d_b);
    cudaFree(d_zf);
    cudaFree(d_sr);
    cudaFree(d_h);
    cudaFree(o.scratch);
  }
  // empty-kernel-like reference: launch with batch 1 zero seqlen
  return 0;
}
