// GPC probe (bench/NOTES.md v61): why CTAs given equal work end up to ~8 % apart, in the same
// TPC pairs run after run on one machine (v47, v60). Two measurements:
//  1. The SM -> GPC map: clusters are placed inside one GPC, so every pair of SMs that share a
//     cluster in some launch share a GPC (union-find over launches of 16-, 8-, 4- and 2-CTA
//     clusters, one CTA per SM).
//  2. Each SM's streaming rate with one CTA per SM, every CTA one thread issuing bulk copies
//     (cp.async.bulk, 32 KiB each, STAGES in flight) of its own region into shared memory:
//     from DRAM (16 MiB a CTA), from L2 (a 192 KiB region read 100 times after a first pass),
//     and from DRAM with only even SMs (one SM a TPC) taking part. Printed by group: its size,
//     the mean / min / max of its SMs' GB/s, so a rate set by the GPC's size shows as a column
//     that falls with the size.
//  3. The decode's fp8 page loads (page_probe): its 128-byte boxes under each L2 promotion,
//     one 4-D latent box, one bulk copy of the page, a bulk copy a row.
//  4. The box forms of both caches (box_probe): fp8 boxes of 64 and 32 rows, bf16 boxes of 64
//     rows, under each L2 promotion. Results: bench/NOTES.md v61.
// Build: nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -cudart static
//        -o build-alt/gpc_probe bench/gpc_probe.cu
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void wait_parity(unsigned b, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(b), "r"(parity)
                 : "memory");
  }
}

__device__ __forceinline__ void init_barriers(uint64_t* bars, int n) {
  for (int s = 0; s < n; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(unsigned(__cvta_generic_to_shared(&bars[s]))));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Stage s's barrier armed for `bytes` (the loads below complete it).
__device__ __forceinline__ unsigned arm_barrier(uint64_t* bars, int s, int bytes) {
  const unsigned b = unsigned(__cvta_generic_to_shared(&bars[s]));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  return b;
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, int bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const CUtensorMap* map, int x, int y, int z, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          dst),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

// Page i of this CTA drawn at random over total_pages (the same pages for every form).
__device__ __forceinline__ int random_page(int i, int total_pages) {
  unsigned h = (blockIdx.x * 2654435761u) ^ (unsigned(i) * 40503u + 0x9e3779b9u);
  h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
  return int(h % unsigned(total_pages));
}

// The dynamic shared memory rounded up to 1024 bytes (the 128-byte swizzle's alignment).
__device__ __forceinline__ uint8_t* aligned_1024(uint8_t* smem_raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// The one-thread ring every probe runs: the barriers initialised, `issue(i)` fills stage
// i % stages and arms its barrier; `total` loads with `stages` in flight; the CTA's SM, start
// and end times go to rec[0..2].
template <class Issue>
__device__ void run_ring(long total, int stages, uint64_t* bars, Issue issue, unsigned long long* rec) {
  rec[0] = smid();
  init_barriers(bars, stages);
  const unsigned long long t0 = now_ns();
  for (long i = 0; i < stages && i < total; ++i) issue(i);
  for (long i = 0; i < total; ++i) {
    wait_parity(unsigned(__cvta_generic_to_shared(&bars[i % stages])), unsigned((i / stages) & 1));
    if (i + stages < total) issue(i + stages);
  }
  rec[1] = t0;
  rec[2] = now_ns();
}

__global__ void cluster_smid(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = int(smid());
}

constexpr int kChunk = 32 * 1024;
constexpr int kMaxStages = 6;

// rec[3 * block] = smid, start, end (ns). only_even: CTAs on odd SMs leave at once.
// placement: 0 each CTA its own region (blockIdx), 1 the region of CTA (blockIdx + 37) % grid,
// 2 interleaved (chunk i of CTA b at (i * grid + b) chunks: all CTAs sweep the buffer together).
__global__ void stream_probe(const uint8_t* buf, size_t region, int passes, int stages, int only_even,
                             int placement, unsigned long long* rec) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  const unsigned sm = smid();
  if (threadIdx.x != 0) return;
  rec[3 * blockIdx.x] = sm;
  rec[3 * blockIdx.x + 1] = 0;
  rec[3 * blockIdx.x + 2] = 0;
  if (only_even && (sm & 1)) return;
  const unsigned owner = placement == 1 ? (blockIdx.x + 37) % gridDim.x : blockIdx.x;
  const uint8_t* base = buf + size_t(owner) * region;
  const long chunks_per_pass = long(region / kChunk);
  const long total = chunks_per_pass * passes;
  auto issue = [&](long i) {
    const int s = int(i % stages);
    const unsigned dst = unsigned(__cvta_generic_to_shared(smem + size_t(s) * kChunk));
    const uint8_t* src = placement == 2 ? buf + (size_t(i % chunks_per_pass) * gridDim.x + blockIdx.x) * kChunk
                                        : base + size_t(i % chunks_per_pass) * kChunk;
    bulk_copy(dst, src, kChunk, arm_barrier(bars, s, kChunk));
  };
  run_ring(total, stages, bars, issue, rec + 3 * blockIdx.x);
}


// 3. The decode's fp8 page loads (page 64: 64 rows of 576 bytes, 36,864 bytes a page) in three
// forms, one CTA an SM, kPageStages pages in flight, each CTA its own run of pages
// (random_pages 0) or pages drawn at random over the whole buffer (1, as kbmla bench's cache):
// form 0 as the decode (four 128-byte latent boxes of 64 rows, 128-byte swizzle, and one
// 64-byte rope box, 64-byte swizzle), form 1 one latent box of 4 x 128 bytes x 64 rows (a 4-D
// map whose third dimension is the 128-byte column block) and the rope box, form 2 one 1-D bulk
// copy of the whole page.
constexpr int kPageBytes = 576 * 64;
constexpr int kPageStages = 5;

__global__ void page_probe(const __grid_constant__ CUtensorMap latent, const __grid_constant__ CUtensorMap rope,
                           const __grid_constant__ CUtensorMap latent4, const uint8_t* buf, int pages_per_cta,
                           int total_pages, int form, int random_pages, unsigned long long* rec) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bars[kPageStages];
  uint8_t* smem = aligned_1024(smem_raw);
  if (threadIdx.x != 0) return;
  auto issue = [&](int i) {
    const int s = i % kPageStages;
    const unsigned dst = unsigned(__cvta_generic_to_shared(smem + size_t(s) * kPageBytes));
    const int page = random_pages ? random_page(i, total_pages) : blockIdx.x * pages_per_cta + i;
    const unsigned b = arm_barrier(bars, s, kPageBytes);
    if (form == 3) {
      for (int row = 0; row < 64; ++row) bulk_copy(dst + row * 576, buf + size_t(page) * kPageBytes + row * 576, 576, b);
      return;
    }
    if (form == 2) {
      bulk_copy(dst, buf + size_t(page) * kPageBytes, kPageBytes, b);
      return;
    }
    if (form == 0) {
      for (int c = 0; c < 4; ++c) tma_load_3d(dst + c * 8192, &latent, c * 128, 0, page, b);
    } else {
      asm volatile(
          "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(
              dst),
          "l"(&latent4), "r"(0), "r"(0), "r"(0), "r"(page), "r"(b)
          : "memory");
    }
    tma_load_3d(dst + 32768, &rope, 512, 0, page, b);
  };
  run_ring(pages_per_cta, kPageStages, bars, issue, rec + 3 * blockIdx.x);
}

// 4. The box forms of both caches under each L2 promotion: rows of row_bytes (576 fp8, 1,152
// bf16), pages of 64 tokens loaded as 64 / box_rows parts, each part latent_boxes boxes of 128
// bytes x box_rows (128-byte swizzle) and, for fp8, a rope box of 64 bytes (64-byte swizzle);
// `stages` pages in flight, pages drawn at random.
__global__ void box_probe(const __grid_constant__ CUtensorMap latent, const __grid_constant__ CUtensorMap rope,
                          int row_bytes, int latent_boxes, int has_rope, int box_rows, int stages, int pages_per_cta,
                          int total_pages, unsigned long long* rec) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  uint8_t* smem = aligned_1024(smem_raw);
  if (threadIdx.x != 0) return;
  const int page_bytes = 64 * row_bytes;
  const int parts = 64 / box_rows;
  auto issue = [&](int i) {
    const int s = i % stages;
    unsigned dst = unsigned(__cvta_generic_to_shared(smem + size_t(s) * page_bytes));
    const int page = random_page(i, total_pages);
    const unsigned b = arm_barrier(bars, s, page_bytes);
    for (int part = 0; part < parts; ++part) {
      for (int c = 0; c < latent_boxes; ++c, dst += 128 * box_rows) tma_load_3d(dst, &latent, c * 128, 0, page * parts + part, b);
      if (has_rope) {
        tma_load_3d(dst, &rope, 512, 0, page * parts + part, b);
        dst += 64 * box_rows;
      }
    }
  };
  run_ring(pages_per_cta, stages, bars, issue, rec + 3 * blockIdx.x);
}

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(int n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) { return p[x] == x ? x : p[x] = find(p[x]); }
  void join(int a, int b) { p[find(a)] = find(b); }
};

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs\n", prop.name, sms);

  // 1. GPC map.
  const int one_per_sm = 120 * 1024;
  CK(cudaFuncSetAttribute(cluster_smid, cudaFuncAttributeMaxDynamicSharedMemorySize, one_per_sm));
  CK(cudaFuncSetAttribute(cluster_smid, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  UnionFind uf(1024);
  std::vector<int> seen(1024, 0);
  int* d_out = nullptr;
  CK(cudaMalloc(&d_out, 4096 * sizeof(int)));
  for (int size : {16, 8, 4, 2}) {
    cudaLaunchConfig_t c{};
    c.blockDim = dim3(32);
    c.dynamicSmemBytes = one_per_sm;
    cudaLaunchAttribute at{};
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = size;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    c.attrs = &at;
    c.numAttrs = 1;
    c.gridDim = dim3(size);
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, cluster_smid, &c));
    if (clusters == 0) {
      std::printf("clusters of %d: none fit\n", size);
      continue;
    }
    const int grid = clusters * size;
    c.gridDim = dim3(grid);
    std::vector<int> h(grid);
    for (int rep = 0; rep < 20; ++rep) {
      CK(cudaLaunchKernelEx(&c, cluster_smid, d_out));
      CK(cudaMemcpy(h.data(), d_out, grid * sizeof(int), cudaMemcpyDeviceToHost));
      for (int b = 0; b < grid; ++b) {
        seen[h[b]] = 1;
        uf.join(h[b], h[b - b % size]);
      }
    }
    std::printf("clusters of %d: %d active at once\n", size, clusters);
  }
  std::map<int, std::vector<int>> gpcs;
  for (int s = 0; s < 1024; ++s)
    if (seen[s]) gpcs[uf.find(s)].push_back(s);
  std::vector<int> gpc_of(1024, -1);
  std::vector<int> gpc_size;
  int g = 0;
  for (auto& [root, members] : gpcs) {
    std::printf("group %d (%zu SMs):", g, members.size());
    for (int s : members) {
      std::printf(" %d", s);
      gpc_of[s] = g;
    }
    std::printf("\n");
    gpc_size.push_back(int(members.size()));
    ++g;
  }

  // 2. Streaming rates.
  const size_t dram_region = size_t(16) << 20, l2_region = size_t(192) << 10;
  uint8_t* buf = nullptr;
  CK(cudaMalloc(&buf, dram_region * sms));
  CK(cudaMemset(buf, 1, dram_region * sms));
  unsigned long long* d_rec = nullptr;
  CK(cudaMalloc(&d_rec, 3 * sizeof(unsigned long long) * sms));
  struct Mode {
    const char* name;
    size_t region;
    int passes, stages, only_even, placement;
  };
  const Mode modes[] = {{"dram 4 stages", dram_region, 1, 4, 0, 0},    {"dram 6 stages", dram_region, 1, 6, 0, 0},
                        {"dram 6 rotated", dram_region, 1, 6, 0, 1},   {"dram 6 interleave", dram_region, 1, 6, 0, 2},
                        {"l2 4 stages", l2_region, 100, 4, 0, 0},      {"l2 6 stages", l2_region, 100, 6, 0, 0},
                        {"dram even SMs 6", dram_region, 1, 6, 1, 0},  {"dram 2 stages", dram_region, 1, 2, 0, 0}};
  for (int round = 0; round < 2; ++round) {
    for (const Mode& m : modes) {
      // 200 KiB asked whatever the stages: one CTA an SM.
      CK(cudaFuncSetAttribute(stream_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
      if (m.region == l2_region)  // first pass brings the regions into L2
        stream_probe<<<sms, 32, 200 * 1024>>>(buf, m.region, 1, m.stages, m.only_even, m.placement, d_rec);
      stream_probe<<<sms, 32, 200 * 1024>>>(buf, m.region, m.passes, m.stages, m.only_even, m.placement, d_rec);
      CK(cudaDeviceSynchronize());
      std::vector<unsigned long long> r(3 * sms);
      CK(cudaMemcpy(r.data(), d_rec, r.size() * sizeof(r[0]), cudaMemcpyDeviceToHost));
      unsigned long long t_first = ~0ull, t_last = 0;
      std::map<int, std::vector<double>> by_gpc;
      std::vector<double> all;
      std::vector<std::pair<int, double>> per_sm;
      for (int b = 0; b < sms; ++b) {
        if (r[3 * b + 2] == 0) continue;
        t_first = std::min(t_first, r[3 * b + 1]);
        t_last = std::max(t_last, r[3 * b + 2]);
        const double gbs = double(m.region) * m.passes / double(r[3 * b + 2] - r[3 * b + 1]);
        by_gpc[gpc_of[int(r[3 * b])]].push_back(gbs);
        all.push_back(gbs);
        per_sm.push_back({int(r[3 * b]), gbs});
      }
      const double mean = std::accumulate(all.begin(), all.end(), 0.0) / all.size();
      const double total = double(m.region) * m.passes * all.size() / double(t_last - t_first);
      std::printf("round %d %-18s %3zu SMs: total %.0f GB/s, per SM mean %.1f min %.1f max %.1f (max/min %.3f)\n",
                  round, m.name, all.size(), total, mean, *std::min_element(all.begin(), all.end()),
                  *std::max_element(all.begin(), all.end()),
                  *std::max_element(all.begin(), all.end()) / *std::min_element(all.begin(), all.end()));
      for (auto& [gi, v] : by_gpc) {
        const double gm = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
        std::printf("   group %2d size %2d active %2zu: mean %.1f min %.1f max %.1f\n", gi,
                    gi >= 0 ? gpc_size[gi] : 0, v.size(), gm, *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
      }
      std::sort(per_sm.begin(), per_sm.end());
      std::printf("   per SM:");
      for (auto& [s, v] : per_sm) std::printf(" %d:%.0f", s, v);
      std::printf("\n   per CTA (block:SM:GB/s, the fastest):");
      for (int b = 0; b < sms; ++b) {
        if (r[3 * b + 2] == 0) continue;
        const double v = double(m.region) * m.passes / double(r[3 * b + 2] - r[3 * b + 1]);
        if (v > mean * 1.05) std::printf(" %d:%d:%.0f", b, int(r[3 * b]), v);
      }
      std::printf("\n");
    }
  }

  // 3. Page loads in the decode's form and two others.
  {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    const int total_pages = int(dram_region * sms / kPageBytes);
    const int pages_per_cta = total_pages / sms;
    CUtensorMap latent[4]{}, rope[4]{}, latent4{};
    const cuuint32_t es[4] = {1, 1, 1, 1};
    const cuuint64_t dims3[3] = {576, 64, cuuint64_t(total_pages)};
    const cuuint64_t str3[2] = {576, 576 * 64};
    const cuuint32_t lbox[3] = {128, 64, 1}, rbox[3] = {64, 64, 1};
    auto chk = [](CUresult r, const char* w) {
      if (r != CUDA_SUCCESS) { std::printf("encode %s failed: %d\n", w, int(r)); std::exit(1); }
    };
    const CUtensorMapL2promotion promo[4] = {CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B};
    const char* promo_name[4] = {"L2 promotion 256B", "L2 promotion none", "L2 promotion 64B", "L2 promotion 128B"};
    for (int k = 0; k < 4; ++k) {
      chk(encode(&latent[k], CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims3, str3, lbox, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, promo[k], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "latent");
      chk(encode(&rope[k], CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims3, str3, rbox, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_64B, promo[k], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "rope");
    }
    const cuuint64_t dims4[4] = {128, 64, 4, cuuint64_t(total_pages)};
    const cuuint64_t str4[3] = {576, 128, 576 * 64};
    const cuuint32_t box4[4] = {128, 64, 4, 1};
    const CUresult r4 = encode(&latent4, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, buf, dims4, str4, box4, es,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r4 != CUDA_SUCCESS) std::printf("the 4-D latent map does not encode (%d): form 1 skipped\n", int(r4));
    const int smem = kPageStages * kPageBytes + 1024;
    CK(cudaFuncSetAttribute(page_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const char* form_name[4] = {"decode boxes", "one latent box", "bulk page", "bulk rows"};
    for (int round = 0; round < 3; ++round)
      for (int random_pages = 0; random_pages < 2; ++random_pages)
        for (int variant = 0; variant < 7; ++variant) {
          // variants 0..3: the decode's boxes under each L2 promotion; 4: one latent box; 5: bulk
          // page; 6: bulk rows.
          const int form = variant < 4 ? 0 : variant - 3;
          const int k = variant < 4 ? variant : 0;
          if (form == 1 && r4 != CUDA_SUCCESS) continue;
          page_probe<<<sms, 32, smem>>>(latent[k], rope[k], latent4, buf, pages_per_cta, total_pages, form,
                                        random_pages, d_rec);
          CK(cudaDeviceSynchronize());
          std::vector<unsigned long long> r(3 * sms);
          CK(cudaMemcpy(r.data(), d_rec, r.size() * sizeof(r[0]), cudaMemcpyDeviceToHost));
          unsigned long long t_first = ~0ull, t_last = 0;
          std::vector<double> per;
          for (int b = 0; b < sms; ++b) {
            t_first = std::min(t_first, r[3 * b + 1]);
            t_last = std::max(t_last, r[3 * b + 2]);
            per.push_back(double(pages_per_cta) * kPageBytes / double(r[3 * b + 2] - r[3 * b + 1]));
          }
          const double mean = std::accumulate(per.begin(), per.end(), 0.0) / per.size();
          std::printf("round %d pages %-10s %-15s %-18s total %.0f GB/s, per SM mean %.1f min %.1f max %.1f\n",
                      round, random_pages ? "random" : "contiguous", form_name[form], form == 0 ? promo_name[k] : "",
                      double(pages_per_cta) * kPageBytes * sms / double(t_last - t_first), mean,
                      *std::min_element(per.begin(), per.end()), *std::max_element(per.begin(), per.end()));
        }
    // 4. Box forms of both caches under each L2 promotion.
    struct BoxForm {
      const char* name;
      int row_bytes, latent_boxes, has_rope, box_rows, stages;
    };
    const BoxForm forms[] = {{"fp8 64-row boxes", 576, 4, 1, 64, 5},
                             {"fp8 32-row boxes", 576, 4, 1, 32, 5},
                             {"bf16 64-row boxes", 1152, 9, 0, 64, 2},
                             {"bf16 64-row boxes 3 st", 1152, 9, 0, 64, 3}};
    CK(cudaFuncSetAttribute(box_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 226 * 1024));
    for (int round = 0; round < 2; ++round)
      for (const BoxForm& f : forms)
        for (int k = 0; k < 4; ++k) {
          const int page_bytes = 64 * f.row_bytes;
          const int total = int(dram_region * sms / page_bytes), per_cta = total / sms;
          const int smem = f.stages * page_bytes + 1024;
          if (smem > 226 * 1024 || f.stages > kMaxStages) {
            std::printf("boxes %s: %d stages of %d bytes do not fit; skipped\n", f.name, f.stages, page_bytes);
            continue;
          }
          CUtensorMap lat{}, rp{};
          const cuuint64_t dims[3] = {cuuint64_t(f.row_bytes), cuuint64_t(f.box_rows),
                                      cuuint64_t(total) * (64 / f.box_rows)};
          const cuuint64_t str[2] = {cuuint64_t(f.row_bytes), cuuint64_t(f.row_bytes) * f.box_rows};
          const cuuint32_t lb[3] = {128, cuuint32_t(f.box_rows), 1}, rb[3] = {64, cuuint32_t(f.box_rows), 1};
          chk(encode(&lat, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims, str, lb, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, promo[k], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              "box latent");
          chk(encode(&rp, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims, str, rb, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_64B, promo[k], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              "box rope");
          box_probe<<<sms, 32, smem>>>(lat, rp, f.row_bytes, f.latent_boxes, f.has_rope, f.box_rows, f.stages, per_cta,
                                       total, d_rec);
          CK(cudaDeviceSynchronize());
          std::vector<unsigned long long> r(3 * sms);
          CK(cudaMemcpy(r.data(), d_rec, r.size() * sizeof(r[0]), cudaMemcpyDeviceToHost));
          unsigned long long t_first = ~0ull, t_last = 0;
          for (int b = 0; b < sms; ++b) {
            t_first = std::min(t_first, r[3 * b + 1]);
            t_last = std::max(t_last, r[3 * b + 2]);
          }
          std::printf("round %d boxes %-24s %-18s total %.0f GB/s\n", round, f.name, promo_name[k],
                      double(per_cta) * page_bytes * sms / double(t_last - t_first));
        }

  }
  std::printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
