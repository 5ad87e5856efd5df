// Device planner: the planner core (planner_core.hpp) run by one CTA on seqlens in device
// memory, into fixed-capacity buffers, so planning is stream-ordered and CUDA-graph
// capturable. Plans use the fixed-grid form (every slot launched, column stride G).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kbmla/planner_search.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {

struct DevicePlanBuffers {
  DevicePlanHeader* header;
  PlanBuffers plan;           // capacities set; cluster_cost unused (null)
  int32_t* split_requests;    // capacity: PlanCapacity::split_requests
  int split_requests_capacity;
  // The walk's arrays for batches above ~2,300 and the probes' step records where they do
  // not fit in shared memory: device_planner_scratch_bytes(shape) bytes, 16-byte aligned;
  // required where that is not 0 (launch_device_planner checks), else null.
  void* scratch = nullptr;
};

// Global scratch the device planner wants for `shape` (0: none).
size_t device_planner_scratch_bytes(const PlanShape& shape);

// shape.fixed_grid must be true. Throws kbmla::Error on a launch failure.
void launch_device_planner(const PlanShape& shape, const int32_t* seqlens, const DevicePlanBuffers& out,
                           cudaStream_t stream);

}  // namespace kbmla
