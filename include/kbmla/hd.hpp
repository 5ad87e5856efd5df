// Host/device annotation shared by every header that must compile for both sides.
// The planner core, the work formats and the schedulers are plain C++ under a host
// compiler, and the very same code under nvcc, so host and device agree bit for bit.
#pragma once

#if defined(__CUDACC__)
#define KBMLA_HD __host__ __device__ __forceinline__
#define KBMLA_HD_NOINLINE __host__ __device__
#else
#define KBMLA_HD inline
#define KBMLA_HD_NOINLINE
#endif
