// Launch-latency probe by kernel-parameter size (bench/NOTES.md v58): an empty kernel of
// 132 x 384 threads with 200 KiB of dynamic shared memory, launched by cudaLaunchKernelEx
// with a (1, 1, 1) cluster as the decode kernels are, taking 0, 256, 1000 (the decode's
// size: two 256-byte map structs and the 488-byte DecodeParams) or 4000 bytes of
// __grid_constant__ parameters. Timed as kbmla bench times a call (event, launch, event,
// synchronise; median of 300) and by the host clock around the launch call alone. Then
// the decode's three-parameter form and a parameterless kernel launched by the runtime
// (cudaLaunchKernelEx) against the driver (cuLaunchKernelEx on cudaGetFuncBySymbol's
// CUfunction). Run it also under CUDA_MODULE_LOADING=EAGER for the module loading's share.
// Build: nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -cudart static
//   -o build-alt/param_probe bench/param_probe.cu
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

template <int kBytes>
struct alignas(64) Blob {
  unsigned char b[kBytes];
};

__global__ void k_none() {}
template <int kBytes>
__global__ void k_blob(const __grid_constant__ Blob<kBytes> p) {
  if (threadIdx.x == 0 && blockIdx.x == 100000 && p.b[kBytes - 1] == 7) asm volatile("trap;");
}
// Three parameters as the decode has them: two 256-byte map structs and 488 bytes.
__global__ void k_three(const __grid_constant__ Blob<256> a, const __grid_constant__ Blob<256> b,
                        const __grid_constant__ Blob<512> c) {
  if (threadIdx.x == 0 && blockIdx.x == 100000 && a.b[0] + b.b[0] + c.b[0] == 7) asm volatile("trap;");
}

static std::vector<float> g_host;
template <class F>
float med(F f, cudaStream_t s, int runs = 300) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> v;
  g_host.clear();
  for (int i = 0; i < runs + 20; ++i) {
    cudaEventRecord(a, s);
    const auto h0 = std::chrono::steady_clock::now();
    f();
    const float host = std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - h0).count();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 20) {
      v.push_back(ms * 1000);
      g_host.push_back(host);
    }
  }
  std::sort(v.begin(), v.end());
  std::sort(g_host.begin(), g_host.end());
  return v[v.size() / 2];
}

template <class... Args>
void launch(void (*k)(Args...), cudaStream_t s, int smem, bool cluster, Args... args) {
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(132);
  c.blockDim = dim3(384);
  c.dynamicSmemBytes = smem;
  c.stream = s;
  cudaLaunchAttribute at[1];
  at[0] = {};
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 1;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  c.attrs = at;
  c.numAttrs = cluster ? 1 : 0;
  cudaLaunchKernelEx(&c, k, args...);
}

// The same launch through the driver: cuLaunchKernelEx on the CUfunction that
// cudaGetFuncBySymbol gives, the parameters as a pointer array built once.
using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
static LaunchEx driver_launch_ex() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &fn, 12000, cudaEnableDefault, &q);
  return reinterpret_cast<LaunchEx>(fn);
}
static void driver_launch(LaunchEx launch, CUfunction f, cudaStream_t s, int smem, bool cluster, void** args) {
  CUlaunchConfig c{};
  c.gridDimX = 132;
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 384;
  c.blockDimY = c.blockDimZ = 1;
  c.sharedMemBytes = smem;
  c.hStream = reinterpret_cast<CUstream>(s);
  CUlaunchAttribute at[1];
  at[0] = {};
  at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at[0].value.clusterDim.x = 1;
  at[0].value.clusterDim.y = 1;
  at[0].value.clusterDim.z = 1;
  c.attrs = at;
  c.numAttrs = cluster ? 1 : 0;
  launch(&c, f, args, nullptr);
}

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(k_none, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k_blob<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k_blob<1000>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k_blob<4000>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k_three, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  Blob<256> b256{};
  Blob<512> b512{};
  Blob<1000> b1000{};
  Blob<4000> b4000{};
  for (int round = 0; round < 3; ++round) {
    for (bool cluster : {false, true}) {
      const float t0 = med([&] { launch(k_none, s, smem, cluster); }, s);
      const float h0 = g_host[g_host.size() / 2];
      const float t1 = med([&] { launch(k_blob<256>, s, smem, cluster, b256); }, s);
      const float h1 = g_host[g_host.size() / 2];
      const float t2 = med([&] { launch(k_blob<1000>, s, smem, cluster, b1000); }, s);
      const float h2 = g_host[g_host.size() / 2];
      const float t3 = med([&] { launch(k_three, s, smem, cluster, b256, b256, b512); }, s);
      const float h3 = g_host[g_host.size() / 2];
      const float t4 = med([&] { launch(k_blob<4000>, s, smem, cluster, b4000); }, s);
      const float h4 = g_host[g_host.size() / 2];
      printf("round %d cluster %d | eager us (host us of the launch call): none %.2f (%.2f) | 256 B %.2f (%.2f) | "
             "1000 B %.2f (%.2f) | 3 params 1024 B %.2f (%.2f) | 4000 B %.2f (%.2f)\n",
             round, int(cluster), t0, h0, t1, h1, t2, h2, t3, h3, t4, h4);
    }
  }
  {
    const LaunchEx drv = driver_launch_ex();
    cudaFunction_t f3 = nullptr, f0 = nullptr;
    cudaGetFuncBySymbol(&f3, reinterpret_cast<const void*>(k_three));
    cudaGetFuncBySymbol(&f0, reinterpret_cast<const void*>(k_none));
    void* args3[3] = {&b256, &b256, &b512};
    for (int round = 0; round < 3; ++round) {
      for (bool cluster : {false, true}) {
        const float r0 = med([&] { launch(k_none, s, smem, cluster); }, s);
        const float hr0 = g_host[g_host.size() / 2];
        const float d0 = med([&] { driver_launch(drv, CUfunction(f0), s, smem, cluster, nullptr); }, s);
        const float hd0 = g_host[g_host.size() / 2];
        const float r3 = med([&] { launch(k_three, s, smem, cluster, b256, b256, b512); }, s);
        const float hr3 = g_host[g_host.size() / 2];
        const float d3 = med([&] { driver_launch(drv, CUfunction(f3), s, smem, cluster, args3); }, s);
        const float hd3 = g_host[g_host.size() / 2];
        printf("round %d cluster %d | runtime none %.2f (%.2f) driver none %.2f (%.2f) | runtime 3 params %.2f (%.2f) "
               "driver 3 params %.2f (%.2f)\n",
               round, int(cluster), r0, hr0, d0, hd0, r3, hr3, d3, hd3);
      }
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
