// Public decode API (sm_90a, bf16 latent cache, d_qk 576 or 512, d_v 512, page size 64).
//
//   kbmla::KvCache cache(kv_ptr, num_pages, 64);                 // once per cache / layer
//   auto plan = kbmla::DevicePlan::create(config, host_seqlens);  // once per decode step
//   kbmla::init_workspace(ws, plan.workspace_bytes(), stream);    // once per workspace
//   kbmla::decode(plan, cache, args);                             // every layer
//
// decode() allocates nothing and never synchronises (unless args.debug_sync). Every
// argument is checked on the host before any launch; values that live on the device
// (seqlens beyond the block table, page indices out of range, seqlens that differ from
// the plan's) are checked in the kernel, which reads nothing out of bounds and ORs bits
// into the workspace's error word (read_device_errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kbmla/planner.hpp"

namespace kbmla {

enum class Policy {
  kWorkList,          // KV-balanced work list (default)
  kStatic,            // seed's static scheduler, one CTA per tile (non-persistent)
  kStaticPersistent,  // seed's static scheduler, persistent CTAs
};
const char* policy_name(Policy p);

// Decode context parallelism: how a request's keys are spread over the ranks.
enum class DcpLayout {
  kContiguous,   // rank r holds one run of global keys: local key j is kv_offsets[b] + j
  kInterleaved,  // local key j is global key j * world + rank
};

// Element type of the latent KV cache.
enum class KvDtype {
  kBFloat16 = 0,  // 2 bytes per value: d_qk x 2 bytes per token
  kFp8E4m3 = 1,   // e4m3 with one fp32 scale for the whole cache (DecodeArgs::kv_scale):
                  // d_qk bytes per token; Q is quantised to e4m3 per row and both products
                  // run on fp8 tensor cores (P in e4m3 too)
  kFp8E4m3PerBlock = 2,  // e4m3 with a scale per 128 values of each token, DeepSeek-V3.2 style:
                  // 656 bytes per token (d_qk 576 only): 512 e4m3 latent values, 4 fp32
                  // scales (value d = e4m3[d] x scale[d / 128]), the 64 rope values in bf16.
                  // No kv_scale; Q is quantised per row (latent part; the rope part stays
                  // bf16), P in e4m3
};

// "bf16", "fp8_e4m3", "fp8_e4m3_block" (the names of the CLI, the cases file and Python).
const char* kv_dtype_name(KvDtype d);

// Bytes per token of a cache of `dtype` with `d_qk` values per token.
constexpr int kv_token_bytes(KvDtype dtype, int d_qk) {
  return dtype == KvDtype::kFp8E4m3PerBlock ? 656 : dtype == KvDtype::kFp8E4m3 ? d_qk : 2 * d_qk;
}

// The planner's default cost model for the sm_90 kernel that serves a cache of `dtype` and
// heads x q_len query rows per request (planner_core.hpp says where its values come from).
inline CostModel sm90_cost_model(KvDtype dtype, int heads, int q_len) {
  const int rows = heads * q_len;
  return dtype == KvDtype::kFp8E4m3PerBlock ? sm90_fp8_block_cost_model(rows)
         : dtype == KvDtype::kFp8E4m3       ? sm90_fp8_cost_model(rows)
                                             : sm90_bf16_cost_model(rows);
}

struct DecodeConfig {
  int heads = 16;         // 1..128
  int q_len = 1;          // 1..16
  int d_qk = 576;         // supported: 576 (latent 512 + rope 64), 512 (no rope: K is the latent)
  int d_v = 512;          // supported: 512
  int page_size = 64;     // tokens per cache page: a power of two in 1..256
  KvDtype kv_dtype = KvDtype::kBFloat16;
  bool causal = true;     // bottom-right aligned among the q_len new tokens
  float softmax_scale = 0.f;  // > 0
  // Decode context parallelism (DCP): with dcp_world > 1 this rank holds part of each
  // request's keys (dcp_layout), the causal mask compares global positions
  // (DecodeArgs::dcp_global_seqlens, dcp_kv_offsets), and out / LSE are this rank's partial
  // results, to be merged across ranks by LSE (kbmla/dcp.hpp).
  int dcp_world = 1;      // 1..1024
  int dcp_rank = 0;       // 0..dcp_world - 1
  DcpLayout dcp_layout = DcpLayout::kContiguous;
};

struct PlanOptions {
  Policy policy = Policy::kWorkList;
  int num_ctas = 0;       // CTA budget; 0 = every SM of the current device
  int static_splits = 0;  // static policies: split count, 0 = best of a cost-model sweep
  std::optional<CostModel> cost;  // planner cost model; default: sm90_{bf16,fp8}_cost_model(rows) by kv_dtype
  // Work list only, host plans: > 0 makes the plan batch-invariant. Each request is split
  // every this many 64-token KV blocks (at least ceil(blocks / 256)), from its own length
  // alone, so its output is bitwise the same whatever else is in the batch (the combine
  // then sums every request of more than 16 splits in one order, whatever its block size);
  // the pieces are then balanced over the CTAs whole. 0: balanced splits (the default, faster).
  int batch_invariant_split_blocks = 0;
};

// Throws kbmla::Error naming the field and its allowed range.
void validate_config(const DecodeConfig& config);

// The planner's shape for this kernel (q tile and cluster for the rows, 64-token blocks,
// the cost model, the batch-invariant option), as DevicePlan::create uses it;
// options.num_ctas is taken as given (0 is resolved only by DevicePlan).
PlanShape decode_plan_shape(const DecodeConfig& config, int batch, const PlanOptions& options);

// A plan in device memory for one decode step (all layers of the step reuse it).
class DevicePlan {
 public:
  // Plans on the host from host seqlens, then copies the plan to the current device
  // (allocates and synchronises: call once per step, outside the per-layer loop).
  static DevicePlan create(const DecodeConfig& config, std::span<const int32_t> seqlens,
                           const PlanOptions& options = {});

  // A plan made on the device (work-list policy): allocates capacity for any seqlens of
  // `batch` requests once; replan() then plans from seqlens in device memory, in stream
  // order, with no host synchronisation, so replan + decode can be captured in a CUDA
  // graph and replayed with new seqlens. Every slot is launched (the grid cannot depend
  // on the seqlens), and workspace_bytes() is the bound for any seqlens.
  static DevicePlan create_device_planned(const DecodeConfig& config, int batch, const PlanOptions& options = {});
  void replan(const int32_t* device_seqlens, void* stream) const;
  bool device_planned() const;
  // Device-made plans: synchronises and copies the plan back (arrays trimmed to the
  // counts the planner left in its header; cluster_cost empty). Host plans: a copy.
  HostPlan download() const;
  int device_plan_status() const;  // synchronises; PlanStatus of the last replan
  DevicePlan(DevicePlan&&) noexcept;
  DevicePlan& operator=(DevicePlan&&) noexcept;
  ~DevicePlan();

  size_t workspace_bytes() const;
  const HostPlan& host_plan() const;  // host-made plans only (device plans: shape and capacities)
  const DecodeConfig& config() const;
  const PlanOptions& options() const;  // with num_ctas and static_splits resolved
  int batch() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit DevicePlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A paged latent cache [num_pages, page_size, kv_token_bytes(dtype, d_qk) bytes] of bf16,
// e4m3 or per-block-scaled e4m3 tokens; builds its TMA descriptors once.
class KvCache {
 public:
  KvCache(const void* data, int64_t num_pages, int page_size, int d_qk = 576, KvDtype dtype = KvDtype::kBFloat16);
  const void* data() const { return data_; }
  int64_t num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }
  int d_qk() const { return d_qk_; }
  KvDtype dtype() const { return dtype_; }
  // The TMA descriptors (CUtensorMap): the latent (and rope) columns, and a second one:
  // kFp8E4m3PerBlock the scales, kFp8E4m3 with d_qk 576 the rope columns (the latent map
  // has 128-byte boxes, the rope part 64 bytes).
  const void* tensor_map() const { return tensor_map_; }
  const void* aux_tensor_map() const { return aux_map_; }

 private:
  const void* data_;
  int64_t num_pages_;
  int page_size_;
  int d_qk_;
  KvDtype dtype_;
  alignas(64) unsigned char tensor_map_[128];
  alignas(64) unsigned char aux_map_[128];
};

// Element strides of a [batch, q_len, heads, ...] tensor whose last dimension is dense.
// All zero (the default) means the dense layout. Otherwise each stride must be positive
// where its dimension has more than one element.
struct RowStrides {
  int64_t batch = 0, token = 0, head = 0;
  bool dense() const { return batch == 0 && token == 0 && head == 0; }
};

enum class LseBase { kE, k2 };       // natural log (default) or log2
enum class QDtype { kBFloat16, kFp8E4m3 };  // Q's element type (e4m3: fp8 caches only)
enum class OutDtype { kBFloat16 };  // the output's element type (bf16 only, for now)

struct DecodeArgs {
  // Q as one tensor: bf16 [batch, q_len, heads, d_qk]; or, for d_qk 576, the latent part
  // here (bf16 [batch, q_len, heads, 512]) and the rope part in q_pe ([..., 64]). TMA reads
  // Q by rows, so each Q tensor's (batch, token, head) must flatten to one row stride
  // (token = heads x head, batch = q_len x token) that is a multiple of 8 elements, and
  // its pointer must be 16-byte aligned.
  const void* q = nullptr;
  const void* q_pe = nullptr;
  RowStrides q_strides;                 // of q (dense: rows of d_qk, or 512 with q_pe)
  RowStrides q_pe_strides;              // of q_pe (dense: rows of 64)
  const float* kv_scale = nullptr;      // fp8 cache only: fp32 [1], device; value = e4m3 x scale
  // fp8 caches may take Q already in e4m3, with its own fp32 scale (q value = e4m3 x
  // q_scale[0], device); then no quantiser runs (with a bf16 Q the decode quantises it per
  // row first). The per-tensor cache: one tensor [batch, q_len, heads, d_qk] of bytes (q_pe
  // null). The per-block cache (whose products take the rope part in bf16): the latent part
  // in q, bytes [batch, q_len, heads, 512], and the rope part in q_pe, bf16 [..., 64]. Rows
  // of e4m3 flatten to one row stride that is a multiple of 16 bytes.
  QDtype q_dtype = QDtype::kBFloat16;
  const float* q_scale = nullptr;
  const int32_t* block_table = nullptr; // int32 [batch, max_pages], device
  int max_pages = 0;
  const int32_t* seqlens = nullptr;     // int32 [batch], device; the values the plan was made from
  void* out = nullptr;                  // [batch, q_len, heads, d_v] of out_dtype, 16-byte aligned
  RowStrides out_strides;               // multiples of 4 elements (8 bytes)
  OutDtype out_dtype = OutDtype::kBFloat16;
  float* lse = nullptr;                 // fp32 [batch, q_len, heads], 4-byte aligned
  RowStrides lse_strides;               // any (vLLM's [heads, tokens]: {q_len, 1, batch * q_len})
  LseBase lse_base = LseBase::kE;
  // Decode context parallelism (config.dcp_world > 1): int32 [batch], device. The
  // request's global key count, and (contiguous layout) the global position of this
  // rank's local key 0. Checked in the kernel against the local seqlens
  // (kErrDcpPositions); rows that see no local key get O = 0 and LSE = -inf.
  const int32_t* dcp_global_seqlens = nullptr;
  const int32_t* dcp_kv_offsets = nullptr;
  void* workspace = nullptr;            // >= plan.workspace_bytes(), 256-byte aligned
  size_t workspace_bytes = 0;
  void* stream = nullptr;               // cudaStream_t
  bool debug_sync = false;              // synchronise and throw on a device error word
  // Optional instrumentation: when non-null, every CTA of the decode writes
  // {start ns, end ns, SM id, items} (4 x uint64, %globaltimer) at timeline[4 * cta].
  // Needs 4 x 8 bytes x timeline_ctas(plan); costs two timer reads per CTA.
  unsigned long long* timeline = nullptr;
  // Likewise for the combine: each of its blocks writes {ns when its wait for the decode
  // returned, ns when it finished} at combine_timeline[2 * block]; 2 x 8 bytes x
  // combine_timeline_blocks(plan).
  unsigned long long* combine_timeline = nullptr;
  // Per-item phases of the first kTimelineItems items of each CTA (the bf16 kernel, and
  // both fp8 kernels' tiles of at most 16 rows): {item start, Q ready, first KV stage
  // full, last block done, output written} (%globaltimer ns; kItemPhases of kItemPhaseSlots
  // slots) at item_timeline[kItemPhaseSlots * (kTimelineItems * cta + item) + phase];
  // 8 x kItemPhaseSlots x kTimelineItems x timeline_ctas(plan) bytes. Entries of items a CTA
  // does not have stay as they were.
  unsigned long long* item_timeline = nullptr;
};

// CTAs the decode of this plan launches (the size of DecodeArgs::timeline / 32 bytes).
int timeline_ctas(const DevicePlan& plan);
// Blocks the combine of this plan launches (DecodeArgs::combine_timeline / 16 bytes; 0:
// no combine).
int combine_timeline_blocks(const DevicePlan& plan);

void decode(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& args);

// Which kernels and operand precisions a decode call with this plan, cache and Q dtype
// takes: the same choices decode() makes (it dispatches on them), made without launching
// anything. The bench prints it for every case; the accuracy bars follow fp8_products.
struct DecodePath {
  std::string kernel;     // the decode kernel and its form, e.g. "fp8 per-tensor split roles, P V over 48 rows"
  std::string q_operand;  // Q's type in S = Q K^T, and what made it
  std::string p_operand;  // P's type in O = P V
  std::string kv_loader;  // how the cache's pages reach shared memory
  std::string combine;    // the merge kernel of split requests after the decode, or "none (...)"
  // Query rows of one CTA's tile; in 2-CTA clusters its slice: 64, or 48 for tiles of
  // 65..96 rows on the per-tensor fp8 split-role kernel.
  int cta_rows = 0;
  int cluster_size = 1;
  // Q or P enter a tensor-core product as e4m3: the fp8 accuracy bars (against the
  // reference on the dequantised cache: relative error < 5e-2, worst row < 8e-2) apply.
  bool fp8_products = false;
  std::string summary() const;  // one line of the fields above
};
DecodePath describe_decode(const DevicePlan& plan, const KvCache& cache, QDtype q_dtype = QDtype::kBFloat16);

// Prepares the workspace's header (the error word, the combine's call counter); call once
// after allocating a workspace. Without it, calls are correct but merge split requests only
// after the whole decode (work_format.hpp, CombineSync).
void init_workspace(void* workspace, size_t bytes, void* stream);
// Synchronises the stream and returns the error word (DeviceErrorBits).
uint32_t read_device_errors(const void* workspace, void* stream);
std::string describe_device_errors(uint32_t bits);

}  // namespace kbmla
