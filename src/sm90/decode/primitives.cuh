// Thin sm_90a primitives over CuTe / CUTLASS: mbarriers, named barriers, TMA loads,
// wgmma descriptors and calls, fences. Everything a role file needs, nothing more.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>

#include "src/sm90/decode/config.hpp"

namespace kbmla::sm90 {

using Mbarrier = cutlass::arch::ClusterTransactionBarrier;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Named barriers over whole, converged warps. The roles meet one barrier at different
// program locations (consumer 0's kBarP sync and consumer 1's are separate code, as are an
// arrive and its sync), as the CUTLASS producer / consumer barriers do. compute-sanitizer
// synccheck reports such a barrier as "divergent threads in block" and racecheck the
// shared-memory writes it orders as hazards (bench/NOTES.md v39, v42); memcheck is the
// sanitizer tier's tool. The non-.aligned barrier.sync / barrier.arrive compile to the same
// BAR instructions but let ptxas re-schedule 32 of the 48 kernels (the fp8 alternating
// kernels' stack frames grew, v42), so the kernels keep bar.sync / bar.arrive.
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// A named barrier that also ORs a predicate over its threads (bar.red.or.pred).
__device__ __forceinline__ bool named_sync_or(uint32_t id, uint32_t threads, bool pred) {
  uint32_t out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}"
      : "=r"(out)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

// The dynamic shared memory's base rounded up to 1024 bytes (swizzled tiles; the
// layouts' alloc has the slack). The result is derived from `raw` by an offset, not
// through an integer, so the compiler still knows it points to shared memory and emits
// LDS/STS rather than generic loads and stores (measured: the fp8 consumers' generic
// row-scale loads were 13 % of consumer 0's stall samples).
__device__ __forceinline__ uint8_t* align_1024(uint8_t* raw) {
  return raw + ((1024u - (static_cast<uint32_t>(__cvta_generic_to_shared(raw)) & 1023u)) & 1023u);
}

// 16 bytes global -> shared without the register file (L2 only: the cache is streamed).
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Generic-proxy shared-memory writes (P, zeroed V rows) before wgmma reads them.
__device__ __forceinline__ void fence_view_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Programmatic dependent launch: block until the previous grid in the stream completed
// and its memory is visible (a no-op when this grid was launched without the attribute).
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One 64 x 64 bf16 box of Q (2D map: [rows][576]) into a 128B-swizzled 8 KiB tile.
__device__ __forceinline__ void tma_load_q_box(const CUtensorMap* map, uint64_t* bar, void* dst, int col, int row) {
  cute::SM90_TMA_LOAD_2D::copy(map, bar, 0, dst, col, row);
}

// KV boxes stream through L2 once per q tile, ahead of the split partials that the
// combine reads right after the decode: evict-first keeps the stream from pushing the
// partials out of L2 (ncu: the combine read them from DRAM; bench/NOTES.md v24). Requests
// of two q tiles (more than 128 rows) read their KV twice and measured level with it.
constexpr uint64_t kKvCacheHint = uint64_t(cute::TMA::CacheHintSm90::EVICT_FIRST);

// One 64-token x 64-column box of a page (3D map: [pages][page_size][576]).
__device__ __forceinline__ void tma_load_kv_box(const CUtensorMap* map, uint64_t* bar, void* dst, int col, int token,
                                                int page) {
  cute::SM90_TMA_LOAD_3D::copy(map, bar, kKvCacheHint, dst, col, token, page);
}

// The same box into the same shared-memory offset of every CTA in `cta_mask` (the 2-CTA
// cluster of more than 64 rows); each destination's mbarrier at `bar`'s offset receives
// the bytes it got.
__device__ __forceinline__ void tma_load_kv_box_multicast(const CUtensorMap* map, uint64_t* bar, void* dst, int col,
                                                          int token, int page, uint16_t cta_mask) {
  cute::SM90_TMA_LOAD_MULTICAST_3D::copy(map, bar, cta_mask, kKvCacheHint, dst, col, token, page);
}

// Rank of this CTA in its cluster (0 without a cluster launch).
__device__ __forceinline__ int cta_rank_in_cluster() { return int(cute::block_rank_in_cluster()); }

// Every thread of every CTA in the cluster: barrier inits visible cluster-wide before any
// remote arrive or multicast, and no CTA leaves while its peer may still write into it.
__device__ __forceinline__ void cluster_barrier() {
  cute::cluster_arrive();
  cute::cluster_wait();
}

// The pipeline barriers both kernels keep at bars[0..]: q_full (the Q loader's
// expect_tx), q_empty (every consumer thread), full[kStages] (the KV loader's arrive) and
// empty[kStages] (every consumer warp of every CTA that receives the stage; release_stage).
// One thread calls it; kernel_prologue_sync then publishes the inits.
template <int kStages>
// loader_warps: the producer warps that arrive on each full barrier (2 in the two-loader
// kernels: kernel.hpp, two_loader_warps).
__device__ __forceinline__ void init_pipeline_barriers(uint64_t* bars, int cluster_size, int loader_warps = 1) {
  Mbarrier::init(bars + 0, 1);
  Mbarrier::init(bars + 1, kConsumerThreads);
  for (int s = 0; s < kStages; ++s) {
    Mbarrier::init(bars + 2 + s, loader_warps);
    Mbarrier::init(bars + 2 + kStages + s, kConsumerWarps * cluster_size);
  }
  cutlass::arch::fence_barrier_init();
}

// Every thread, after the inits: they become visible (cluster-wide with clusters), then
// the combine (a programmatic dependent) may launch; it waits for this grid's completion
// before reading anything, so this only hides its launch latency.
__device__ __forceinline__ void kernel_prologue_sync(int cluster_size) {
  if (cluster_size > 1) {
    cluster_barrier();
  } else {
    __syncthreads();
  }
  asm volatile("griddepcontrol.launch_dependents;");
}

// A consumer warp gives a KV stage back. The stage's empty barrier counts one arrival per
// consumer warp of every CTA that receives the stage (8 x cluster size): with multicast a
// producer may refill a stage only when both CTAs are done with their copies. Lane c
// arrives on CTA c's barrier, after every lane of the warp finished reading the stage.
__device__ __forceinline__ void release_stage(uint64_t* empty_bar, int lane, int cluster_size) {
  __syncwarp();
  if (cluster_size == 1) {
    if (lane == 0) Mbarrier::arrive(empty_bar);
  } else if (lane < cluster_size) {
    Mbarrier::arrive(empty_bar, uint32_t(lane), 1u);
  }
}

// wgmma shared-memory descriptors for the 128-byte swizzle (start address 1024-aligned
// atoms; offsets inside an atom's 128-byte row are plain additions, as the hardware
// swizzles on address bits).
//  K-major (Q, K, P): rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); LBO unused.
//  MN-major (V as B of PV): 64 contiguous columns per 128-byte row, the next 64 columns
//  one 8 KiB box further (LBO = 8192), 8-token groups 1024 bytes apart (SBO).
__device__ __forceinline__ uint64_t gmma_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                              cute::SM90::GMMA::LayoutType layout = cute::SM90::GMMA::LayoutType::B128) {
  cute::GmmaDescriptor d;
  d.desc_ = 0;
  d.bitfield.start_address_ = static_cast<uint16_t>(smem_byte_addr >> 4);
  d.bitfield.leading_byte_offset_ = static_cast<uint16_t>(lbo_bytes >> 4);
  d.bitfield.stride_byte_offset_ = static_cast<uint16_t>(sbo_bytes >> 4);
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = static_cast<uint8_t>(layout);
  return d.desc_;
}
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) { return gmma_desc(addr, 16, 1024); }
// The descriptor of the same tile `bytes` further: the start-address field (bits 0..13,
// address / 16) plus bytes / 16. Shared addresses are below 2^18, so the field never
// carries into the next one. Building each k-step's descriptor from its address instead
// cost ~12 uniform instructions per wgmma, the larger part of issuing S (ncu, fp8 v14).
// Only the low word changes (one 32-bit add, not a 64-bit add with carry).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xffffffff00000000ull) | lo;
}
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr) { return gmma_desc(addr, kBoxBytes, 1024); }
// The fp8 kernel's tiles (Q, K, P, V^T): K-major, 64-byte rows with the 64-byte swizzle,
// 8-row groups 512 bytes apart; a k-step of 32 e4m3 is +32 bytes inside the row.
__device__ __forceinline__ uint64_t desc_k_major_sw64(uint32_t addr) {
  return gmma_desc(addr, 16, 512, cute::SM90::GMMA::LayoutType::B64);
}

template <class Atom, int N, size_t... I>
__device__ __forceinline__ void wgmma_call(uint64_t da, uint64_t db, float (&d)[N], bool accumulate,
                                           std::index_sequence<I...>) {
  Atom::fma(da, db, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// S (64 x 64) += Q (K-major) x K^T (K-major): 32 fp32 per thread.
__device__ __forceinline__ void wgmma_qk(uint64_t da, uint64_t db, float (&d)[32], bool accumulate) {
  using Atom = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  wgmma_call<Atom>(da, db, d, accumulate, std::make_index_sequence<32>{});
}

// O (64 x 256) += P (K-major) x V (MN-major): 128 fp32 per thread.
__device__ __forceinline__ void wgmma_pv(uint64_t da, uint64_t db, float (&d)[128]) {
  using Atom = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
  wgmma_call<Atom>(da, db, d, true, std::make_index_sequence<128>{});
}

// Tiles of at most 16 query rows (consumer_narrow.cuh): S^T (64 tokens x 16 rows) += K
// (K-major) x Q^T (K-major); O^T (64 dims x 16 rows) += V^T (MN-major: the stage's rows
// as they are) x P^T (K-major). 8 fp32 per thread each.
__device__ __forceinline__ void wgmma_st_narrow(uint64_t da, uint64_t db, float (&d)[8], bool accumulate) {
  using Atom = cute::SM90::GMMA::MMA_64x16x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  wgmma_call<Atom>(da, db, d, accumulate, std::make_index_sequence<8>{});
}
__device__ __forceinline__ void wgmma_ot_narrow(uint64_t da, uint64_t db, float (&d)[8]) {
  using Atom = cute::SM90::GMMA::MMA_64x16x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::MN, cute::SM90::GMMA::Major::K>;
  wgmma_call<Atom>(da, db, d, true, std::make_index_sequence<8>{});
}

// fp8: S (64 x 64) += Q x K^T, both e4m3 K-major in shared memory.
__device__ __forceinline__ void wgmma_qk_fp8(uint64_t da, uint64_t db, float (&d)[32], bool accumulate) {
  using Atom = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>;
  wgmma_call<Atom>(da, db, d, accumulate, std::make_index_sequence<32>{});
}

// S^T (64 tokens x 16 rows) += K x Q^T in bf16 (the per-block fp8 cache's rope part).
__device__ __forceinline__ void wgmma_kq_bf16(uint64_t da, uint64_t db, float (&d)[8], bool accumulate) {
  using Atom = cute::SM90::GMMA::MMA_64x16x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  wgmma_call<Atom>(da, db, d, accumulate, std::make_index_sequence<8>{});
}

// fp8: S^T (64 tokens x 16 rows) += K x Q^T, both e4m3 K-major in shared memory (the
// first 16 rows of the Q tile).
__device__ __forceinline__ void wgmma_kq_fp8(uint64_t da, uint64_t db, float (&d)[8], bool accumulate) {
  using Atom = cute::SM90::GMMA::MMA_64x16x32_F32E4M3E4M3_SS_TN<>;
  wgmma_call<Atom>(da, db, d, accumulate, std::make_index_sequence<8>{});
}

// fp8: O^T (64 dims x 64 rows) += V^T (64 x 32 tokens, registers) x P^T (P K-major in
// shared memory). A fragment (8-bit): a[0] row x = l/4 of the warp's 16, k 4(l%4)..+3;
// a[1] row x + 8; a[2], a[3] the same rows at k + 16.
// N = 64 (32 fp32 per thread), 48 or 32 for the split-role kernels' tiles of at most that
// many rows, or 16 for tiles of at most 16 query rows (the first N rows of the P tile, N / 2
// fp32 per thread).
template <class Atom, int N, size_t... I>
__device__ __forceinline__ void wgmma_rs_call(const uint32_t (&a)[4], uint64_t db, float (&d)[N],
                                              std::index_sequence<I...>) {
  Atom::fma(a[0], a[1], a[2], a[3], db, d[I]..., cute::SM90::GMMA::ScaleOut::One);
}
// m64n48k32, e4m3 A from registers (CuTe has this shape only in its extended-shapes header,
// ~29,000 lines that every decode translation unit would then parse): 24 accumulators.
__device__ __forceinline__ void wgmma_pv_fp8_rs_n48(const uint32_t (&a)[4], uint64_t db, float (&d)[24]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, "
      "{%24, %25, %26, %27}, %28, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <int N>
__device__ __forceinline__ void wgmma_pv_fp8_rs(const uint32_t (&a)[4], uint64_t db, float (&d)[N]) {
  static_assert(N == 32 || N == 24 || N == 16 || N == 8, "P V accumulators: N / 2 per thread, N = 64, 48, 32 or 16");
  if constexpr (N == 24) {
    wgmma_pv_fp8_rs_n48(a, db, d);
  } else {
    using Atom = std::conditional_t<N == 32, cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_RS_TN<>,
                                    std::conditional_t<N == 16, cute::SM90::GMMA::MMA_64x32x32_F32E4M3E4M3_RS_TN<>,
                                                       cute::SM90::GMMA::MMA_64x16x32_F32E4M3E4M3_RS_TN<>>>;
    wgmma_rs_call<Atom>(a, db, d, std::make_index_sequence<N>{});
  }
}

// Four 8 x 8 matrices of 16-bit elements, transposed: lanes 8j..8j+7 give the row
// addresses of matrix j; lane l receives, of each matrix, elements (2(l%4), l/4) and
// (2(l%4) + 1, l/4) of the source (low and high half).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Keeps the compiler from moving accumulator reads/writes across wgmma issue/wait.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

template <uint32_t Regs>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}
template <uint32_t Regs>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}

}  // namespace kbmla::sm90
