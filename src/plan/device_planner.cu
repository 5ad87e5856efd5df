#include "src/plan/device_planner.hpp"

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

static_assert(kCapProbes == 32, "one probe per lane of a warp");

// The K probes of a search round, one per lane; the lowest lane that fits wins.
struct WarpProbes {
  template <class Fits>
  __device__ int operator()(const CapSearch& s, Fits& fits) const {
    const bool ok = fits(s.probe(int(threadIdx.x % 32)));
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    return mask ? __ffs(int(mask)) - 1 : kCapProbes;
  }
};

constexpr int kSmemSeqlens = 12 * 1024;  // 48 KiB of seqlens staged in shared memory

// Warp 0 searches the cap (32 probes per round in parallel); lane 0 then counts and writes
// the plan. On any failure the plan is left empty but well-formed: every slot's column
// starts with a negative entry.
__global__ void __launch_bounds__(256) device_planner_kernel(const __grid_constant__ PlanShape shape,
                                                             const int32_t* seqlens_global,
                                                             const __grid_constant__ DevicePlanBuffers out) {
  extern __shared__ int32_t staged[];
  const int32_t* seqlens = seqlens_global;
  if (shape.batch <= kSmemSeqlens) {
    for (int b = threadIdx.x; b < shape.batch; b += blockDim.x) staged[b] = seqlens_global[b];
    __syncthreads();
    seqlens = staged;
  }
  if (threadIdx.x >= 32) return;
  DevicePlanHeader h{};
  PlanCounts counts = plan_measure_with(shape, seqlens, WarpProbes{});
  if (threadIdx.x != 0) return;
  PlanBuffers buffers = out.plan;
  int status = counts.status;
  if (status == kPlanOk) status = plan_write(shape, seqlens, counts, buffers);
  h.status = status;
  h.bad_index = counts.bad_index;
  if (status != kPlanOk) {
    const int G = shape.num_ctas / shape.cluster_size;
    for (int g = 0; g < G && g < buffers.work_list_capacity; ++g) buffers.work_list[g] = kNoWork;
    for (int b = 0; b < shape.batch; ++b) buffers.num_splits[b] = 0;
    *out.header = h;
    return;
  }
  int n = 0;
  for (int wide = 1; wide >= 0; --wide) {
    for (int b = 0; b < shape.batch; ++b) {
      const int ns = buffers.num_splits[b];
      if (ns > 1 && (ns > kCombineNarrowSplits) == bool(wide) && n < out.split_requests_capacity) {
        out.split_requests[n++] = b;
      }
    }
    if (wide) h.num_wide_requests = n;
  }
  h.num_split_requests = n;
  h.num_zero_fill = counts.num_zero_fill;
  h.num_slots = counts.num_slots;
  h.num_items = counts.num_items;
  *out.header = h;
}

}  // namespace

void launch_device_planner(const PlanShape& shape, const int32_t* seqlens, const DevicePlanBuffers& out,
                           cudaStream_t stream) {
  require(shape.fixed_grid, "device planner: the shape must use the fixed-grid form");
  const size_t smem = shape.batch <= kSmemSeqlens ? size_t(shape.batch) * sizeof(int32_t) : 0;
  device_planner_kernel<<<1, 256, smem, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
