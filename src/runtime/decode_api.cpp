// Runtime of the public decode API: argument checks, device plan upload, TMA descriptors,
// dispatch of the decode and combine launches.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <optional>
#include <vector>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/error.hpp"
#include "kbmla/helpers.hpp"
#include "kbmla/static_baseline.hpp"
#include "src/combine/combine.hpp"
#include "src/common/per_device.hpp"
#include "src/plan/device_planner.hpp"
#include "src/runtime/decode_internal.hpp"
#include "src/runtime/plan_impl.hpp"
#include "src/runtime/tensor_maps.hpp"
#include "src/sm90/decode/config.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla {

namespace {

void check_cuda(cudaError_t err, const char* what) {
  require(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

using detail::aligned;

}  // namespace

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kBFloat16: return "bf16";
    case KvDtype::kFp8E4m3: return "fp8_e4m3";
    case KvDtype::kFp8E4m3PerBlock: return "fp8_e4m3_block";
  }
  return "unknown";
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kWorkList: return "worklist";
    case Policy::kStatic: return "static";
    case Policy::kStaticPersistent: return "static_persistent";
  }
  return "unknown";
}

void validate_config(const DecodeConfig& c) {
  require(c.heads >= 1 && c.heads <= 128, "decode: heads (", c.heads, ") must be in 1..128");
  require(c.q_len >= 1 && c.q_len <= 16, "decode: q_len (", c.q_len, ") must be in 1..16");
  require(c.d_qk == 576 || c.d_qk == 512, "decode: d_qk (", c.d_qk, ") is not supported; supported: 576, 512");
  require(c.d_v == 512, "decode: d_v (", c.d_v, ") is not supported; supported: 512");
  require(detail::supported_page_size(c.page_size), "decode: page_size (", c.page_size,
          ") is not supported; supported: powers of two 1..256");
  require(c.kv_dtype == KvDtype::kBFloat16 || c.kv_dtype == KvDtype::kFp8E4m3 ||
              c.kv_dtype == KvDtype::kFp8E4m3PerBlock,
          "decode: kv_dtype (", int(c.kv_dtype), ") is not one of kBFloat16, kFp8E4m3, kFp8E4m3PerBlock");
  require(c.kv_dtype != KvDtype::kFp8E4m3PerBlock || c.d_qk == 576, "decode: kv_dtype kFp8E4m3PerBlock has d_qk 576 "
          "(512 latent + 64 rope values per 656-byte token), got d_qk ", c.d_qk);
  require(c.softmax_scale > 0.f && std::isfinite(c.softmax_scale), "decode: softmax_scale (", c.softmax_scale,
          ") must be positive and finite");
  require(c.dcp_world >= 1 && c.dcp_world <= 1024, "decode: dcp_world (", c.dcp_world, ") must be in 1..1024");
  require(c.dcp_rank >= 0 && c.dcp_rank < c.dcp_world, "decode: dcp_rank (", c.dcp_rank, ") must be in 0..",
          c.dcp_world - 1, " (dcp_world ", c.dcp_world, ")");
  require(c.dcp_layout == DcpLayout::kContiguous || c.dcp_layout == DcpLayout::kInterleaved, "decode: dcp_layout ",
          int(c.dcp_layout), " is not one of kContiguous, kInterleaved");
}

DevicePlan::DevicePlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DevicePlan::DevicePlan(DevicePlan&&) noexcept = default;
DevicePlan& DevicePlan::operator=(DevicePlan&&) noexcept = default;
DevicePlan::~DevicePlan() = default;
namespace {
// fp8 caches: Q quantised to e4m3 [batch x rows][d_qk] by the quantiser kernel (per-block:
// its latent part) and its row scales, after the decode's partial outputs.
struct Fp8QArea {
  size_t q8_offset, scale_offset, end;
};
Fp8QArea fp8_q_area(const HostPlan& h, const DecodeConfig& c) {
  const size_t rows = size_t(h.shape.batch) * c.heads * c.q_len;
  Fp8QArea a{};
  a.q8_offset = h.workspace_bytes(c.d_v);
  a.scale_offset = a.q8_offset + align_up(rows * size_t(c.d_qk), kWorkspaceAlign);
  a.end = a.scale_offset + align_up(rows * sizeof(float), kWorkspaceAlign);
  return a;
}

}  // namespace

size_t DevicePlan::workspace_bytes() const {
  if (impl_->config.kv_dtype != KvDtype::kBFloat16) return fp8_q_area(impl_->host, impl_->config).end;
  return impl_->host.workspace_bytes(impl_->config.d_v);
}
const HostPlan& DevicePlan::host_plan() const { return impl_->host; }
const DecodeConfig& DevicePlan::config() const { return impl_->config; }
const PlanOptions& DevicePlan::options() const { return impl_->options; }
int DevicePlan::batch() const { return impl_->host.shape.batch; }
bool DevicePlan::device_planned() const { return impl_->device_planned; }

PlanShape decode_plan_shape(const DecodeConfig& config, int batch, const PlanOptions& options) {
  PlanShape shape;
  shape.batch = batch;
  shape.q_len = config.q_len;
  shape.heads = config.heads;
  // Under context parallelism a row's visible local keys depend on global positions the
  // planner does not see: it plans every q tile (as without a mask), and the kernel masks
  // and skips blocks by global position.
  shape.causal = config.causal && config.dcp_world == 1;
  shape.cluster_size = sm90_cluster_size(config.heads, config.q_len);
  shape.tile_rows = kSm90RowsPerCta * shape.cluster_size;
  shape.kv_block = sm90::kBlockTokens;
  shape.num_ctas = options.num_ctas;
  shape.fixed_split_blocks = options.batch_invariant_split_blocks;
  shape.cost = options.cost ? *options.cost : sm90_cost_model(config.kv_dtype, config.heads, config.q_len);
  return shape;
}

namespace {

// The current device's SM count and co-resident 2-CTA clusters. Plans are made every step,
// and the property and occupancy queries cost driver round trips: they are asked once per
// device ordinal.
struct DeviceBudget {
  int sm_count = 0, pair_clusters = 0;
};
DeviceBudget current_device_budget() {
  static PerDevice<DeviceBudget> budgets;
  return budgets.get([](int d) {
    DeviceInfo dev = query_device(d);
    require(dev.present, "plan: no CUDA device to plan for: ", dev.reason);
    return DeviceBudget{dev.sm_count, dev.supported ? sm90::max_active_clusters(2) : dev.sm_count / 2};
  });
}

// 0 = every SM; for 2-CTA clusters, as many CTAs as the device co-schedules in clusters
// (a GPC with an odd number of free SMs leaves one idle), so no cluster slot of the
// persistent grid waits for another to finish.
int resolve_num_ctas(int requested, const DecodeConfig& config) {
  if (requested != 0) return requested;
  const DeviceBudget b = current_device_budget();
  if (sm90_cluster_size(config.heads, config.q_len) == 1) return b.sm_count;
  return std::min(b.sm_count, 2 * b.pair_clusters);
}
}  // namespace

DevicePlan DevicePlan::create_device_planned(const DecodeConfig& config, int batch, const PlanOptions& options) {
  validate_config(config);
  require(batch >= 1, "plan: batch (", batch, ") must be >= 1");
  require(options.policy == Policy::kWorkList, "plan: device planning makes work-list plans; policy ",
          policy_name(options.policy), " is planned on the host (DevicePlan::create)");
  require(options.batch_invariant_split_blocks == 0, "plan: batch_invariant_split_blocks (",
          options.batch_invariant_split_blocks,
          ") is for host plans (DevicePlan::create): a device plan's workspace is sized for "
          "balanced splits (at most 2 (G - 1) partial slots)");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->options.num_ctas = resolve_num_ctas(options.num_ctas, config);
  impl->device_planned = true;
  PlanShape shape = decode_plan_shape(config, batch, impl->options);
  shape.fixed_grid = true;
  validate_plan_shape(shape);
  const PlanCapacity cap = plan_capacity(shape);
  impl->capacity = cap;
  HostPlan& h = impl->host;
  h.shape = shape;
  h.counts.num_q_tiles = int((int64_t{shape.heads} * shape.q_len + shape.tile_rows - 1) / shape.tile_rows);
  h.counts.num_clusters = h.counts.num_active_clusters = shape.num_ctas / shape.cluster_size;
  h.counts.num_slots = int(cap.partial_slots);
  // Layout (int32): header (8) | work list | num_splits | first_slot | bounds_offset | bounds | zero_fill | split_requests | planner scratch
  const size_t B = size_t(batch);
  const size_t lists = 8 + size_t(cap.work_list) + 3 * B + size_t(cap.bounds) + size_t(cap.zero_fill) +
                       size_t(cap.split_requests) + 1;
  // Then, 16-byte aligned, the device planner's scratch (a large batch's walk arrays and
  // step records: device_planner_scratch_bytes).
  const size_t scratch_at = (lists + 3) / 4 * 4;
  const size_t scratch_bytes = device_planner_scratch_bytes(shape);
  const size_t total = scratch_at + (scratch_bytes + 3) / 4;
  check_cuda(cudaMalloc(&impl->device, total * sizeof(int32_t)), "plan: cudaMalloc");
  impl->device_sm_count = current_device_budget().sm_count;  // (after every check of the arguments)
  // An empty, well-formed plan until the first replan: every entry negative, header zero.
  check_cuda(cudaMemset(impl->device, 0xff, total * sizeof(int32_t)), "plan: cudaMemset");
  check_cuda(cudaMemset(impl->device, 0, 8 * sizeof(int32_t)), "plan: cudaMemset");
  int32_t* d = impl->device;
  impl->header = reinterpret_cast<DevicePlanHeader*>(d);
  int32_t* wl = d + 8;
  int32_t* ns = wl + cap.work_list;
  int32_t* fs = ns + B;
  int32_t* bo = fs + B;
  int32_t* bd = bo + B;
  int32_t* zf = bd + cap.bounds;
  int32_t* sr = zf + cap.zero_fill;
  impl->work_list = wl;
  impl->splits = {ns, fs, bo, bd};
  impl->zero_fill = zf;
  impl->split_requests_dev = sr;
  DevicePlanBuffers& buf = impl->buffers;
  buf.header = impl->header;
  buf.plan.work_list = wl;
  buf.plan.work_list_capacity = int(cap.work_list);
  buf.plan.num_splits = ns;
  buf.plan.first_slot = fs;
  buf.plan.bounds_offset = bo;
  buf.plan.bounds = bd;
  buf.plan.bounds_capacity = int(cap.bounds);
  buf.plan.zero_fill = zf;
  buf.plan.zero_fill_capacity = int(cap.zero_fill);
  buf.split_requests = sr;
  buf.split_requests_capacity = int(cap.split_requests);
  buf.scratch = scratch_bytes > 0 ? static_cast<void*>(d + scratch_at) : nullptr;
  // num_splits = -1 would read as "no work" only by accident: make it 0.
  check_cuda(cudaMemset(ns, 0, B * sizeof(int32_t)), "plan: cudaMemset");
  return DevicePlan(std::move(impl));
}

HostPlan DevicePlan::download() const {
  const Impl& P = *impl_;
  if (!P.device_planned) return P.host;
  check_cuda(cudaDeviceSynchronize(), "download: synchronize");
  DevicePlanHeader header{};
  check_cuda(cudaMemcpy(&header, P.header, sizeof header, cudaMemcpyDeviceToHost), "download: header");
  HostPlan h;
  h.shape = P.host.shape;
  h.counts = P.host.counts;
  h.counts.status = header.status;
  h.counts.num_slots = header.num_slots;
  h.counts.num_items = header.num_items;
  h.counts.num_zero_fill = header.num_zero_fill;
  const size_t B = size_t(h.shape.batch);
  auto fetch = [](const int32_t* src, size_t n) {
    std::vector<int32_t> v(n);
    if (n) check_cuda(cudaMemcpy(v.data(), src, n * sizeof(int32_t), cudaMemcpyDeviceToHost), "download: copy");
    return v;
  };
  h.num_splits = fetch(P.splits.num_splits, B);
  h.first_slot = fetch(P.splits.first_slot, B);
  h.bounds_offset = fetch(P.splits.bounds_offset, B);
  int bounds = 0, pieces = 0;
  for (int32_t n : h.num_splits) {
    pieces += n;
    if (n > 0) bounds += n + 1;
  }
  h.counts.num_pieces = pieces;
  h.counts.num_bounds = bounds;
  h.bounds = fetch(P.splits.bounds, size_t(bounds));
  h.zero_fill = fetch(P.zero_fill, size_t(std::max(header.num_zero_fill, 0)));
  // The work list: columns of G entries until a full row of negatives.
  const int G = h.counts.num_clusters;
  std::vector<int32_t> all = fetch(P.work_list, size_t(P.capacity.work_list));
  int rows = 0, max_items = 0;
  for (; rows * G < int(all.size()); ++rows) {
    bool any = false;
    for (int g = 0; g < G; ++g) any |= all[size_t(rows) * G + g] >= 0;
    if (!any) break;
    max_items = rows + 1;
  }
  h.counts.max_items_per_cluster = max_items;
  h.counts.work_list_len = G * (max_items + 1);
  h.work_list.assign(all.begin(), all.begin() + std::min<size_t>(all.size(), size_t(h.counts.work_list_len)));
  return h;
}

int DevicePlan::device_plan_status() const {
  if (!impl_->device_planned) return kPlanOk;
  DevicePlanHeader header{};
  check_cuda(cudaDeviceSynchronize(), "device_plan_status: synchronize");
  check_cuda(cudaMemcpy(&header, impl_->header, sizeof header, cudaMemcpyDeviceToHost), "device_plan_status: copy");
  return header.status;
}

void DevicePlan::replan(const int32_t* device_seqlens, void* stream) const {
  require(impl_->device_planned, "replan: this plan was made on the host; use DevicePlan::create_device_planned");
  require(device_seqlens != nullptr, "replan: seqlens is null");
  launch_device_planner(impl_->host.shape, device_seqlens, impl_->buffers, static_cast<cudaStream_t>(stream));
}

std::unique_ptr<DevicePlan::Impl> detail::make_host_impl(const DecodeConfig& config, std::span<const int32_t> seqlens,
                                                          const PlanOptions& options) {
  validate_config(config);
  require(!seqlens.empty(), "plan: seqlens is empty; batch must be >= 1");
  auto impl = std::make_unique<DevicePlan::Impl>();
  impl->config = config;
  impl->options = options;
  impl->options.num_ctas = resolve_num_ctas(options.num_ctas, config);
  PlanShape shape = decode_plan_shape(config, int(seqlens.size()), impl->options);
  require(options.batch_invariant_split_blocks >= 0, "plan: batch_invariant_split_blocks (",
          options.batch_invariant_split_blocks, ") must be >= 0 (0: balanced splits)");
  require(options.batch_invariant_split_blocks == 0 || options.policy == Policy::kWorkList,
          "plan: batch_invariant_split_blocks (", options.batch_invariant_split_blocks,
          ") needs the work-list policy, not ", policy_name(options.policy));
  if (options.policy == Policy::kWorkList) {
    impl->host = make_host_plan(shape, seqlens);
  } else {
    const bool persistent = options.policy == Policy::kStaticPersistent;
    if (impl->options.static_splits == 0) {
      impl->options.static_splits = best_static_split(shape, seqlens, persistent).best_split_kv;
    }
    impl->host = make_static_plan(shape, seqlens, impl->options.static_splits);
  }
  detail::record_split_requests(*impl);
  return impl;
}

DevicePlan DevicePlan::create(const DecodeConfig& config, std::span<const int32_t> seqlens, const PlanOptions& options) {
  std::unique_ptr<Impl> impl = detail::make_host_impl(config, seqlens, options);
  const PlanShape& shape = impl->host.shape;
  const HostPlan& h = impl->host;
  // Layout: work list | num_splits | first_slot | bounds_offset | bounds | zero_fill | split_requests
  const size_t n_wl = h.work_list.size(), B = size_t(shape.batch), n_bounds = h.bounds.size(),
               n_zero = h.zero_fill.size(), n_split = impl->split_requests.size();
  std::vector<int32_t> blob;
  blob.reserve(n_wl + 3 * B + n_bounds + n_zero + n_split + 1);
  auto append = [&](const std::vector<int32_t>& v) { blob.insert(blob.end(), v.begin(), v.end()); };
  append(h.work_list);
  append(h.num_splits);
  append(h.first_slot);
  append(h.bounds_offset);
  append(h.bounds);
  append(h.zero_fill);
  append(impl->split_requests);
  blob.push_back(kNoWork);  // never empty
  check_cuda(cudaMalloc(&impl->device, blob.size() * sizeof(int32_t)), "plan: cudaMalloc");
  impl->device_sm_count = current_device_budget().sm_count;  // (after every check of the arguments)
  check_cuda(cudaMemcpy(impl->device, blob.data(), blob.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
             "plan: copy to device");
  const int32_t* d = impl->device;
  impl->work_list = d;
  impl->splits = {d + n_wl, d + n_wl + B, d + n_wl + 2 * B, d + n_wl + 3 * B};
  impl->zero_fill = d + n_wl + 3 * B + n_bounds;
  impl->split_requests_dev = impl->zero_fill + n_zero;
  return DevicePlan(std::move(impl));
}

void decode(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& a) {
  detail::decode_with_mode(plan, cache, a, sm90::KernelMode::kFull);
}

void detail::decode_with_mode(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& a,
                              sm90::KernelMode mode, bool with_combine) {
  const DevicePlan::Impl& P = plan.impl();
  const DecodeConfig& c = P.config;
  const HostPlan& h = P.host;
  const int B = h.shape.batch;
  require(a.block_table != nullptr, "decode: block_table is null");
  require(a.seqlens != nullptr, "decode: seqlens is null");
  require(a.max_pages >= 1, "decode: max_pages (", a.max_pages, ") must be >= 1");
  require(a.workspace != nullptr && aligned(a.workspace, kWorkspaceAlign), "decode: workspace must be non-null and ",
          kWorkspaceAlign, "-byte aligned");
  require(a.workspace_bytes >= plan.workspace_bytes(), "decode: workspace has ", a.workspace_bytes,
          " bytes, the plan needs ", plan.workspace_bytes());
  require(cache.page_size() == c.page_size && cache.d_qk() == c.d_qk, "decode: cache (page_size ", cache.page_size(),
          ", d_qk ", cache.d_qk(), ") does not match the plan's config (page_size ", c.page_size, ", d_qk ", c.d_qk,
          ")");
  const bool fp8 = c.kv_dtype == KvDtype::kFp8E4m3;
  const bool per_block = c.kv_dtype == KvDtype::kFp8E4m3PerBlock;
  require(cache.dtype() == c.kv_dtype, "decode: the cache's dtype (", kv_dtype_name(cache.dtype()),
          ") does not match the plan's config kv_dtype (", kv_dtype_name(c.kv_dtype), ")");
  require(!fp8 || (a.kv_scale != nullptr && aligned(a.kv_scale, 4)),
          "decode: an fp8 cache needs kv_scale, a 4-byte aligned device pointer to its fp32 scale");
  require(fp8 || a.kv_scale == nullptr, "decode: kv_scale is set but the cache is ", kv_dtype_name(c.kv_dtype),
          per_block ? " (its scales are in the cache)" : "");
  const detail::QPath q_path = detail::choose_q_path(P, a.q_dtype);  // (checks q_dtype)
  const bool q_e4m3 = q_path == detail::QPath::kCallerE4m3;
  require(!q_e4m3 || (a.q_scale != nullptr && aligned(a.q_scale, 4)),
          "decode: an e4m3 Q needs q_scale, a 4-byte aligned device pointer to its fp32 scale");
  require(q_e4m3 || a.q_scale == nullptr, "decode: q_scale is set but q is bf16 (q_dtype kBFloat16)");
  require(c.kv_dtype == KvDtype::kBFloat16 || mode == sm90::KernelMode::kFull,
          "decode: the fp8 kernels have the full mode only");
  const int64_t q_rows = int64_t{B} * c.q_len * c.heads;
  require(q_rows < (int64_t{1} << 31), "decode: batch x q_len x heads (", q_rows, ") must be < 2^31");
  require(int64_t{B} * a.max_pages < (int64_t{1} << 40), "decode: block table too large");

  uint8_t* ws_base = static_cast<uint8_t*>(a.workspace);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  sm90::QMaps q_maps{};
  int q_pe_col = 0;
  const float* q_scale = nullptr;
  int q_scale_stride = 0;
  sm90::QuantizeQArgs quantize{};
  std::optional<detail::QSource> q_source;  // the per-tensor kernel's in-kernel quantisation
  bool q_staged = false;                    // the split-role kernel's staged bf16 Q
  // The per-block kernels' Q boxes: 16 rows for the narrow kernel, else 64.
  const int block_q_rows = per_block && sm90::fp8_block_narrow(c.heads * c.q_len, h.shape.cluster_size)
                               ? int(sm90::kFp8BlockNarrowQRows)
                               : sm90::kRowsPerCta;
  if (q_e4m3 && per_block) {
    // The caller's e4m3 latent part and bf16 rope part, and its one scale (every row reads
    // q_scale[0]).
    const detail::QSource q = detail::check_e4m3_block_q(c, B, a);
    detail::fp8_block_q_maps_for(q, a, a.q, q.q_row, block_q_rows, P.q_maps, q_maps, q_pe_col);
    q_scale = a.q_scale;
  } else if (q_e4m3) {
    // The caller's e4m3 Q and its one scale (every row reads q_scale[0]).
    const int64_t row_stride = detail::check_e4m3_q(c, B, a);
    detail::fp8_q_maps_for(c, int64_t{B} * c.q_len * c.heads, a.q, row_stride, P.q_maps, q_maps, q_pe_col);
    q_scale = a.q_scale;
  } else if (per_block) {
    // The latent part of Q to e4m3 per row (scale over its 512 values), by the decode's
    // consumers or into the workspace by the quantiser; the rope part is read as it is
    // (bf16, by TMA).
    const detail::QSource q = detail::check_q(c, B, a);
    if (q_path == detail::QPath::kInline) q_source = q;
    const Fp8QArea area = fp8_q_area(h, c);
    uint8_t* q8 = ws_base + area.q8_offset;
    float* row_scales = reinterpret_cast<float*>(ws_base + area.scale_offset);
    quantize = {a.q, q.q_row, nullptr, 0, sm90::kDqkNoRope, sm90::kDqkNoRope, q.rows, q8, row_scales};
    detail::fp8_block_q_maps_for(q, a, q8, sm90::kDqkNoRope, block_q_rows, P.q_maps, q_maps, q_pe_col);
    q_scale = row_scales;
    q_scale_stride = 1;
  } else if (q_path == detail::QPath::kStaged) {
    // The split-role kernel's Q (q_staged_fp8.cuh): the bf16 rows by TMA in boxes of 32
    // rows, quantised by its softmax warpgroup; no quantiser kernel.
    detail::q_maps_for(c, B, a, P.q_maps, q_maps, q_pe_col, sm90::kFp8StagedQRows);
    q_staged = true;
  } else if (q_path == detail::QPath::kInline) {
    // A bf16 Q that the decode's consumers quantise per row themselves (q_inline_fp8.cuh):
    // no Q maps, no quantiser kernel.
    q_source = detail::check_q(c, B, a);
  } else if (q_path == detail::QPath::kQuantiserKernel) {
    // Q to e4m3 per row, into the workspace; launched ahead of the decode on the same
    // stream once every host check has passed.
    const detail::QSource q = detail::check_q(c, B, a);
    const Fp8QArea area = fp8_q_area(h, c);
    uint8_t* q8 = ws_base + area.q8_offset;
    float* row_scales = reinterpret_cast<float*>(ws_base + area.scale_offset);
    quantize = {a.q, q.q_row, a.q_pe, q.pe_row, int(q.latent_cols), c.d_qk, q.rows, q8, row_scales};
    detail::fp8_q_maps_for(c, q.rows, q8, c.d_qk, P.q_maps, q_maps, q_pe_col);
    q_scale = row_scales;
    q_scale_stride = 1;
  } else {
    detail::q_maps_for(c, B, a, P.q_maps, q_maps, q_pe_col);
  }
  const OutputView output = detail::output_view(c, B, a);
  const KeyVisibility vis = detail::key_visibility(c, a);

  const WorkspaceLayout ws = workspace_layout(h.counts.num_slots, c.heads * c.q_len, c.d_v);
  // The fields the kernel choice reads (shape, pages and parts, the row gather), as
  // describe_decode sets them; then the call's own.
  sm90::DecodeParams p = detail::kernel_choice_params(P);
  p.batch = B;
  p.num_q_tiles = h.counts.num_q_tiles;
  p.max_pages = a.max_pages;
  p.seqlen_capacity = int(std::min<int64_t>(int64_t{a.max_pages} * c.page_size, std::numeric_limits<int>::max()));
  p.num_pages = cache.num_pages();
  p.kv_cache = static_cast<const uint8_t*>(cache.data());
  p.kv_scale = a.kv_scale;
  p.q_scale = q_scale;
  p.q_scale_stride = q_scale_stride;
  p.q_inline = q_source.has_value();
  p.q_staged = q_staged;
  if (q_source) {
    p.q_bf16 = a.q;
    p.q_pe_bf16 = a.q_pe;
    p.q_row = q_source->q_row;
    p.q_pe_row = q_source->pe_row;
    p.q_latent_cols = per_block ? sm90::kDqkNoRope : int(q_source->latent_cols);
  }
  p.scale_log2 = c.softmax_scale * 1.4426950408889634f;
  p.q_pe_col = q_pe_col;
  p.vis = vis;
  p.block_table = a.block_table;
  p.seqlens = a.seqlens;
  p.output = output;
  p.partial_o = ws_base + ws.partial_o_offset;
  p.partial_lse = reinterpret_cast<float*>(ws_base + ws.partial_lse_offset);
  // The merge's parameters only where this call merges (load-only and no-combine calls skip them).
  const bool merges = mode == sm90::KernelMode::kFull && with_combine;
  CombineParams cp = merges ? detail::combine_plan_params(P) : CombineParams{};
  const bool early_merges = merges && detail::early_merges_wanted(P, cp);
  CombineSync* const sync = reinterpret_cast<CombineSync*>(ws_base + kCombineSyncOffset);
  p.piece_flags = early_merges ? reinterpret_cast<unsigned long long*>(ws_base + ws.piece_flags_offset) : nullptr;
  p.piece_row_groups = piece_row_groups(c.heads * c.q_len);
  // (The workspace holds ceil(rows / 64) flags a slot; slices of 48 rows exist only in
  // tiles of 65..96 rows, two flags either way.)
  require((c.heads * c.q_len + p.cta_rows - 1) / p.cta_rows <= p.piece_row_groups,
          "decode: internal: CTA row slices of ", p.cta_rows, " rows need more piece flags than the workspace holds");
  p.combine_sync = sync;
  p.error_word = reinterpret_cast<uint32_t*>(ws_base + ws.error_word_offset);
  p.timeline = a.timeline;
  p.item_timeline = a.item_timeline;
  p.work_list = P.work_list;
  p.plan_header = P.device_planned ? P.header : nullptr;
  p.splits = P.splits;
  dim3 grid;
  const int clusters = h.shape.num_ctas / h.shape.cluster_size;
  switch (P.options.policy) {
    case Policy::kWorkList:
      p.policy = sm90::KernelPolicy::kWorkList;
      p.sched = StaticTileSchedulerParams(true, B, p.num_q_tiles, p.cluster_size, 1);
      grid = dim3(h.counts.num_active_clusters * p.cluster_size);
      break;
    case Policy::kStatic:
      p.policy = sm90::KernelPolicy::kStatic;
      p.sched = StaticTileSchedulerParams(false, B, p.num_q_tiles, p.cluster_size, P.options.static_splits);
      {
        GridShape g = StaticTileScheduler::grid_shape(p.sched, clusters);
        require(g.y <= 65535 && g.z <= 65535, "decode: static grid (", g.x, ", ", g.y, ", ", g.z,
                ") exceeds the launch limits");
        grid = dim3(g.x, g.y, g.z);
      }
      break;
    case Policy::kStaticPersistent:
      p.policy = sm90::KernelPolicy::kStaticPersistent;
      p.sched = StaticTileSchedulerParams(true, B, p.num_q_tiles, p.cluster_size, P.options.static_splits);
      grid = dim3(StaticTileScheduler::grid_shape(p.sched, clusters).x);
      break;
  }
  p.grid_ctas = int(grid.x);
  if (grid.x > 0) {
    const CUtensorMap& kv_map = *reinterpret_cast<const CUtensorMap*>(cache.tensor_map());
    if (per_block) {
      sm90::KvBlockMaps kv_maps;
      std::memcpy(&kv_maps.data, cache.tensor_map(), sizeof(CUtensorMap));
      std::memcpy(&kv_maps.scales, cache.aux_tensor_map(), sizeof(CUtensorMap));
      const bool after_quantiser = !q_e4m3 && !p.q_inline;
      if (after_quantiser) sm90::launch_quantize_q(quantize, stream);
      sm90::launch_decode_fp8_block(q_maps, kv_maps, p, grid, stream, after_quantiser);
    } else if (fp8) {
      sm90::KvFp8Maps kv_maps;
      std::memcpy(&kv_maps.latent, cache.tensor_map(), sizeof(CUtensorMap));
      std::memcpy(&kv_maps.rope, cache.aux_tensor_map(), sizeof(CUtensorMap));
      const bool after_quantiser = !q_e4m3 && !p.q_inline && !p.q_staged;
      if (after_quantiser) sm90::launch_quantize_q(quantize, stream);
      sm90::launch_decode_fp8(q_maps, kv_maps, p, grid, stream, after_quantiser);
    } else {
      sm90::launch_decode_bf16(q_maps, kv_map, p, grid, stream, mode);
    }
  }
  if (!merges) return;

  cp.timeline = a.combine_timeline;
  cp.partial_o = p.partial_o;
  cp.partial_lse = p.partial_lse;
  cp.piece_flags = p.piece_flags;
  cp.piece_row_groups = p.piece_row_groups;
  cp.piece_rows = p.cta_rows;
  cp.sync = early_merges ? sync : nullptr;
  cp.output = output;
  launch_combine(cp, stream);

  if (a.debug_sync) {
    const uint32_t bits = read_device_errors(a.workspace, a.stream);
    require(bits == 0, "decode: device reported: ", describe_device_errors(bits));
  }
}

}  // namespace kbmla
