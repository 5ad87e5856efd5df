// Launch of the sm_90a bf16 decode kernel (host side).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kbmla/error.hpp"
#include "src/sm90/decode/config.hpp"
#include "src/sm90/decode/params.hpp"

namespace kbmla::sm90 {

// Grid: work list and static persistent (n, 1, 1); static non-persistent
// (cluster, B * q tiles, split_kv). Throws kbmla::Error on a launch failure.
// Clusters of `cluster_size` CTAs of the decode kernel the current device runs at once
// (cudaOccupancyMaxActiveClusters): the persistent grid's size in clusters.
int max_active_clusters(int cluster_size);

// Q's TMA maps: the latent columns (q, or q_nope when Q comes in two tensors) and the rope
// columns (q_pe, or q itself read from column 512; unused for d_qk 512).
struct QMaps {
  CUtensorMap latent;
  CUtensorMap rope;
};

// The per-tensor fp8 cache's maps (config_fp8.hpp): the latent columns in boxes of 128
// bytes (128-byte swizzle), the rope columns in one box of 64 (64-byte swizzle; unused
// for d_qk 512).
struct KvFp8Maps {
  CUtensorMap latent;
  CUtensorMap rope;
};

// The per-block fp8 cache's maps (656-byte rows as bytes): `data` the latent and rope
// boxes (128 bytes, 128-byte swizzle), `scales` the 16 scale bytes of each row (no swizzle).
struct KvBlockMaps {
  CUtensorMap data;
  CUtensorMap scales;
};

// The launch configuration of a decode kernel: `threads` threads (kThreads, or the
// split-role kernels' 512), `smem_bytes`, the grid in clusters of `cluster_size` (attrs[0])
// and, when `programmatic`, the permission to begin before the previous kernel in the
// stream ends (attrs[1]; that kernel triggers it).
cudaLaunchConfig_t cluster_config(dim3 grid, int cluster_size, uint32_t smem_bytes, cudaStream_t stream,
                                  cudaLaunchAttribute (&attrs)[2], bool programmatic, int threads = kThreads);

// What every decode kernel's launch shares: `threads` threads, `smem_bytes` of dynamic shared
// memory (attr_err: the kernel's limit raise, done once per kernel and device by the caller,
// reserve_dynamic_smem), p.cluster_size-CTA clusters, the arguments (q_maps, kv_map, p). Throws naming `who`.
// `programmatic`: a programmatic dependent of the previous kernel in the stream (the fp8
// Q quantiser), which must then be waited for (griddepcontrol.wait) before its output is read.
// KvMaps: the kernel's cache maps (CUtensorMap, KvFp8Maps, KvBlockMaps).
template <class KvMaps>
void launch_clustered(void (*kernel)(QMaps, KvMaps, DecodeParams), uint32_t smem_bytes, cudaError_t attr_err,
                      const QMaps& q_maps, const KvMaps& kv_maps, const DecodeParams& p, dim3 grid,
                      cudaStream_t stream, const char* who, bool programmatic = false, int threads = kThreads) {
  require(attr_err == cudaSuccess, who, ": cannot reserve ", smem_bytes, " bytes of shared memory: ",
          cudaGetErrorString(attr_err));
  require(grid.x % unsigned(p.cluster_size) == 0, who, ": grid.x (", grid.x,
          ") is not a multiple of the cluster size (", p.cluster_size, ")");
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t config =
      cluster_config(grid, p.cluster_size, smem_bytes, stream, attrs, programmatic, threads);
  const cudaError_t launch_err = cudaLaunchKernelEx(&config, kernel, q_maps, kv_maps, p);
  require(launch_err == cudaSuccess, who, ": kernel launch failed: ", cudaGetErrorString(launch_err));
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, who, ": kernel launch failed: ", cudaGetErrorString(err));
}

void launch_decode_bf16(const QMaps& q_maps, const CUtensorMap& kv_map, const DecodeParams& p, dim3 grid,
                        cudaStream_t stream, KernelMode mode = KernelMode::kFull);

// Whether a second producer warp loads the odd pages of each block (producer.cuh,
// run_kv_loader's kTwoLoaders): blocks of 4 or more pages by TMA (pages of 8 and 16
// tokens), one CTA per tile. A kernel instantiation of its own, so that the other page
// sizes run the one-loader kernel unchanged.
inline bool two_loader_warps(const DecodeParams& p) {
  return p.page_log2 <= 4 && !p.gather_rows && p.cluster_size == 1;
}

// Whether a bf16 request runs the narrow consumers (consumer_narrow.cuh: S^T and O^T with
// N = 16): tiles of at most 16 rows, one CTA, d_qk 576, pages of 32+ tokens by TMA with one
// loader warp. d_qk 512 and two loader warps (pages of 8 and 16) measured 1-3 % slower on
// long items with them and keep the 64-row consumers, as does the row gather
// (bench/NOTES.md v41). KBMLA_BF16_NARROW=never turns it off (read per call: A/B runs).
bool bf16_narrow_enabled();
inline bool bf16_narrow_tile(const DecodeParams& p) {
  return p.rows <= kBf16NarrowRows && p.cluster_size == 1 && p.d_qk == kDqk && !p.gather_rows &&
         !two_loader_warps(p) && bf16_narrow_enabled();
}

// Tiles of at most this many query rows (one CTA) take the fp8 kernels' narrow
// instantiations (S^T and P V with N = 16).
constexpr int kFp8NarrowRows = 16;
inline bool fp8_narrow(int rows, int cluster_size) { return rows <= kFp8NarrowRows && cluster_size == 1; }

// Whether the per-tensor fp8 requests of more than 16 rows run the split-role kernel
// (kernel_fp8_split.cu: a softmax warpgroup feeding two P V warpgroups; bench/NOTES.md v32)
// rather than the alternating consumers: tiles of one CTA, or 2-CTA clusters of 64 rows a
// CTA (more than 64 rows; the KV multicast to both), pages loaded by TMA (8+ tokens;
// pages of 8 and 16 with two loader warps, one CTA and d_qk 576 only; the row gather of
// smaller pages is the alternating kernel's); d_qk 576 or 512 (the caller checked it).
// Clusters: bench/NOTES.md v39.
inline bool fp8_split_roles(const DecodeParams& p) {
  const bool one_cta = p.cluster_size == 1 && p.rows > kFp8NarrowRows && p.rows <= 64;
  return (one_cta || p.cluster_size == 2) && !p.gather_rows && !(p.d_qk == 512 && two_loader_warps(p));
}
// The split-role kernels' P V rows N for a tile of `rows` rows (one tile per request): 64,
// or 48 / 32 for tiles of at most that many (Kimi K3's 12 heads x q_len 4; 16 x 2, 8 x 4),
// whose padding rows' share of P V is then not computed (bench/NOTES.md v35: -2..-5 % on
// the 48-row Kimi case). Calls f with std::integral_constant<int, N / 2>, the P V
// warpgroups' accumulators per M block (a kernel instantiation per N).
template <class F>
decltype(auto) with_split_pv_acc(int rows, F&& f) {
  if (rows <= 32) return f(std::integral_constant<int, 16>{});
  if (rows <= 48) return f(std::integral_constant<int, 24>{});
  return f(std::integral_constant<int, 32>{});
}
// The split-role kernel's bf16 Q (DecodeParams::q_staged): rows per staged half, the rows
// of its Q maps' boxes (q_staged_fp8.cuh).
constexpr int kFp8StagedQRows = 32;
// Whether the per-block fp8 requests of more than 16 rows run the split-role kernel
// (kernel_fp8_block_split.cu; bench/NOTES.md v32): one CTA per tile of 17..64 rows or 2-CTA
// clusters of 64 rows a CTA (v39), pages of 8+ tokens by TMA (8 and 16 with two loader
// warps, one CTA only; the row gather of smaller pages is the alternating kernel's).
inline bool fp8_block_split_roles(const DecodeParams& p) {
  const bool one_cta = p.cluster_size == 1 && p.rows > kFp8NarrowRows && p.rows <= 64;
  return (one_cta || p.cluster_size == 2) && !p.gather_rows;
}
// The rows of a split-role kernel's CTA: the request's, or its slice of a 2-CTA cluster's
// tile (DecodeParams::cta_rows).
inline int split_cta_rows(const DecodeParams& p) { return p.cluster_size > 1 ? p.cta_rows : p.rows; }
// DecodeParams::cta_rows. A request of 65..96 rows is one 2-CTA tile. Cut at row 64, both
// CTAs run P V over 64 rows (N is the launch's), the second CTA's 1..32 rows padded, in
// lockstep (the shared KV ring). Cut into two slices of at most 48 rows, both run P V over
// 48 (m64n48k32: 3/4 of the tensor work of P V): Kimi K3's 24 heads x q_len 4 and 96 heads
// x q_len 1 are such tiles, 3-4 % faster so on the per-tensor split-role kernel with
// d_qk 576 (bench/NOTES.md v56). S stays over 64 rows (wgmma M): a slice's 16 extra rows
// are computed and not written. Only there: d_qk 512's P V over 64 rows would write the
// other slice's rows, and the per-block split kernel gained nothing on those tiles while
// the sliced code alone cost its 64-row tiles 0.8-1.6 % (v56). 64 everywhere else.
constexpr int kBalancedClusterRows = kSlicedCtaRows;  // (work_format.hpp: the piece flags' divisor)
inline int cluster_cta_rows(const DecodeParams& p, bool split_pv_follows_rows) {
  const bool balanced = p.cluster_size == 2 && p.rows > kRowsPerCta && p.rows <= 2 * kBalancedClusterRows;
  return balanced && split_pv_follows_rows ? kBalancedClusterRows : kRowsPerCta;
}
// false with KBMLA_FP8_SPLIT_ROLES=never (A/B against the alternating kernels); auto or
// unset: true; any other value is an error.
bool split_roles_enabled();
// An A/B switch read from the environment at each call (the tests switch it), without
// allocating: false when `name` is "never", true when it is "auto" or unset; any other
// value is an error naming the variable and its value.
bool env_switch_not_never(const char* name);
// fp8_split_roles / fp8_block_split_roles and split_roles_enabled.
bool fp8_split_kernel_wanted(const DecodeParams& p);
bool fp8_block_split_kernel_wanted(const DecodeParams& p);
void launch_decode_fp8_split(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid,
                             cudaStream_t stream, bool after_quantiser);
void launch_decode_fp8_block_split(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                                   cudaStream_t stream, bool after_quantiser);

// fp8 (e4m3) cache: `q_maps.latent` / `.rope` are the maps of the e4m3 Q (as KvFp8Maps); p.q_scale
// and p.kv_scale are set; or, with p.q_inline, the maps are unset and the consumers quantise a
// bf16 Q themselves. `after_quantiser`: the Q quantiser was launched just before on
// `stream`, and the decode becomes its programmatic dependent. Full mode only.
void launch_decode_fp8(const QMaps& q_maps, const KvFp8Maps& kv_maps, const DecodeParams& p, dim3 grid,
                       cudaStream_t stream, bool after_quantiser);

// fp8 cache with per-block scales (config_fp8_block.hpp): q_maps.latent the e4m3 Q of the
// 512 latent columns (per-row scales p.q_scale; unused with p.q_inline, the consumers
// quantise them), q_maps.rope the bf16 rope bytes (one 128-byte box from byte p.q_pe_col).
// `after_quantiser` as for launch_decode_fp8.
void launch_decode_fp8_block(const QMaps& q_maps, const KvBlockMaps& kv_maps, const DecodeParams& p, dim3 grid,
                             cudaStream_t stream, bool after_quantiser);
// Whether the per-block kernel for at most 16 rows runs (S^T, 16-row Q tile): its Q maps
// then have boxes of 16 rows (config_fp8_block.hpp, SmemLayoutT).
inline bool fp8_block_narrow(int rows, int cluster_size) { return fp8_narrow(rows, cluster_size); }
constexpr uint32_t kFp8BlockNarrowQRows = 16;

// The decode kernel a call's DecodeParams select. The three launch functions dispatch on
// these choices, and describe_decode (src/runtime/decode_path.cpp) reports them, so what
// is reported is what runs. Throws kbmla::Error for what no kernel supports.
enum class DecodeKernel {
  kBf16Tile64,      // bf16: two consumer warpgroups on a 64-row tile (consumer.cuh)
  kBf16Narrow,      // bf16: tiles of at most 16 rows, S^T and O^T with N = 16 (consumer_narrow.cuh)
  kFp8Alternating,  // per-tensor fp8: two consumers alternate blocks (consumer_fp8.cuh)
  kFp8Narrow,       // per-tensor fp8: tiles of at most 16 rows, N = 16
  kFp8Split,        // per-tensor fp8: a softmax warpgroup and two P V warpgroups (consumer_fp8_split.cuh)
  kFp8BlockAlternating,
  kFp8BlockNarrow,
  kFp8BlockSplit,
};
struct KernelChoice {
  DecodeKernel kernel = DecodeKernel::kBf16Tile64;
  bool two_loader_warps = false;  // a second TMA loader warp takes the odd parts of a block
  bool gather_rows = false;       // pages gathered row by row with cp.async instead of TMA
  bool cluster_copies = false;    // the alternating per-tensor kernel's 2-CTA form (one consumer copy each)
  int pv_rows = 64;               // the split-role kernels' P V rows (N: 64, 48 or 32)
};
// (kernel_choice.cpp)
KernelChoice choose_bf16_kernel(const DecodeParams& p, KernelMode mode);
KernelChoice choose_fp8_kernel(const DecodeParams& p);
KernelChoice choose_fp8_block_kernel(const DecodeParams& p);

// Quantises Q (bf16 rows, or the latent columns from q and the rope columns from q_pe) to
// e4m3 per row: scale = max |q| / 448, q8 = q / scale. q8 dense [rows][d_qk], scales [rows].
struct QuantizeQArgs {
  const void* q;        // bf16
  int64_t q_row;        // elements between rows of q
  const void* q_pe;     // bf16 or null (then columns >= 512 come from q)
  int64_t q_pe_row;
  int latent_cols;      // columns taken from q: d_qk, or 512 when q_pe is given
  int d_qk;
  int64_t rows;
  uint8_t* q8;
  float* scales;
};
void launch_quantize_q(const QuantizeQArgs& a, cudaStream_t stream);

}  // namespace kbmla::sm90
