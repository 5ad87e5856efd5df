// Launch-latency probe (bench/NOTES.md v47): an empty kernel of 132 x 384 threads, event,
// launch, event, synchronise (as kbmla bench times a call), median of 300, launched plainly
// and by cudaLaunchKernelEx with and without a (1, 1, 1) cluster and the programmatic
// attribute. Build: nvcc -O2 -gencode arch=compute_90a,code=sm_90a -cudart static
// -o build-alt/launch_probe bench/launch_probe.cu
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
__global__ void k_empty(int* p) { if (p && threadIdx.x == 0 && blockIdx.x == 100000) *p = 1; }
template <class F> float med(F f, cudaStream_t s, int runs = 300) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> v;
  for (int i = 0; i < runs + 20; ++i) {
    cudaEventRecord(a, s); f(); cudaEventRecord(b, s); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); if (i >= 20) v.push_back(ms * 1000);
  }
  std::sort(v.begin(), v.end()); return v[v.size() / 2];
}
int main() {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int smem = 200 * 1024;
  cudaFuncSetAttribute(k_empty, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int round = 0; round < 2; ++round) {
  for (int sm : {0, smem}) {
    auto plain = [&] { k_empty<<<132, 384, sm, s>>>(nullptr); };
    auto ex = [&](bool cluster, bool pdl) {
      cudaLaunchConfig_t c{}; c.gridDim = dim3(132); c.blockDim = dim3(384); c.dynamicSmemBytes = sm; c.stream = s;
      cudaLaunchAttribute at[2]; int n = 0;
      if (cluster) { at[n] = {}; at[n].id = cudaLaunchAttributeClusterDimension; at[n].val.clusterDim.x = 1; at[n].val.clusterDim.y = 1; at[n].val.clusterDim.z = 1; ++n; }
      if (pdl) { at[n] = {}; at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[n].val.programmaticStreamSerializationAllowed = 1; ++n; }
      c.attrs = at; c.numAttrs = n;
      cudaLaunchKernelEx(&c, k_empty, (int*)nullptr);
    };
    printf("smem %6d plain %.2f us | Ex none %.2f | Ex cluster1 %.2f | Ex pdl %.2f | Ex cluster1+pdl %.2f | two launches plain %.2f | cluster1 then pdl %.2f\n", sm,
           med(plain, s), med([&] { ex(false, false); }, s), med([&] { ex(true, false); }, s), med([&] { ex(false, true); }, s),
           med([&] { ex(true, true); }, s), med([&] { plain(); plain(); }, s), med([&] { ex(true, false); ex(true, true); }, s));
  }}
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
