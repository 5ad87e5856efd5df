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

// The grid of every launch here: one CTA per H200 SM, the decode's 384 threads.
constexpr unsigned kCtas = 132, kThreads = 384;

// Medians over `runs` timed launches: the event-timed call and the host's time in it.
struct Timing {
  float eager_us, host_us;
};
static float median(std::vector<float>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
template <class F>
Timing med(F f, cudaStream_t s, int runs = 300) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> eager, host;
  for (int i = 0; i < runs + 20; ++i) {
    cudaEventRecord(a, s);
    const auto h0 = std::chrono::steady_clock::now();
    f();
    const float h = std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - h0).count();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 20) {
      eager.push_back(ms * 1000);
      host.push_back(h);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return {median(eager), median(host)};
}

template <class... Args>
void launch(void (*k)(Args...), cudaStream_t s, int smem, bool cluster, Args... args) {
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(kCtas);
  c.blockDim = dim3(kThreads);
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
  c.gridDimX = kCtas;
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = kThreads;
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
      const Timing t0 = med([&] { launch(k_none, s, smem, cluster); }, s);
      const Timing t1 = med([&] { launch(k_blob<256>, s, smem, cluster, b256); }, s);
      const Timing t2 = med([&] { launch(k_blob<1000>, s, smem, cluster, b1000); }, s);
      const Timing t3 = med([&] { launch(k_three, s, smem, cluster, b256, b256, b512); }, s);
      const Timing t4 = med([&] { launch(k_blob<4000>, s, smem, cluster, b4000); }, s);
      printf("round %d cluster %d | eager us (host us of the launch call): none %.2f (%.2f) | 256 B %.2f (%.2f) | "
             "1000 B %.2f (%.2f) | 3 params 1024 B %.2f (%.2f) | 4000 B %.2f (%.2f)\n",
             round, int(cluster), t0.eager_us, t0.host_us, t1.eager_us, t1.host_us, t2.eager_us, t2.host_us,
             t3.eager_us, t3.host_us, t4.eager_us, t4.host_us);
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
        const Timing r0 = med([&] { launch(k_none, s, smem, cluster); }, s);
        const Timing d0 = med([&] { driver_launch(drv, CUfunction(f0), s, smem, cluster, nullptr); }, s);
        const Timing r3 = med([&] { launch(k_three, s, smem, cluster, b256, b256, b512); }, s);
        const Timing d3 = med([&] { driver_launch(drv, CUfunction(f3), s, smem, cluster, args3); }, s);
        printf("round %d cluster %d | runtime none %.2f (%.2f) driver none %.2f (%.2f) | runtime 3 params %.2f (%.2f) "
               "driver 3 params %.2f (%.2f)\n",
               round, int(cluster), r0.eager_us, r0.host_us, d0.eager_us, d0.host_us, r3.eager_us, r3.host_us,
               d3.eager_us, d3.host_us);
      }
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
