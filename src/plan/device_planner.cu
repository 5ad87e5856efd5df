#include "src/plan/device_planner.hpp"

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

// One thread plans (the core is sequential); the others wait. On any failure the plan is
// left empty but well-formed: every slot's column starts with a negative entry.
__global__ void device_planner_kernel(const __grid_constant__ PlanShape shape, const int32_t* seqlens,
                                      const __grid_constant__ DevicePlanBuffers out) {
  if (threadIdx.x != 0) return;
  DevicePlanHeader h{};
  PlanCounts counts = plan_measure(shape, seqlens);
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
  device_planner_kernel<<<1, 32, 0, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
