// An engine-shaped decode loop (issue 6): 24 MLA layers, each with its own paged bf16
// cache, one request batch growing by one token per step. The step — replan on the GPU
// from device seqlens, then the 24 layers' decodes — is captured once in a CUDA graph and
// replayed every step after the new seqlens are copied in; no host synchronisation inside
// a step. Prints the time per step and per layer and the decode tokens/s.
//
//   build/kbmla_example_decode_loop [batch] [steps]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/error.hpp"

namespace {

constexpr int kLayers = 24;
constexpr int kHeads = 16;  // Kimi K3-like heads per GPU
constexpr int kQLen = 1;
constexpr int kPage = 64;
constexpr int kDqk = 576, kDv = 512;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <class T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) try {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 64;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 100;
  kbmla::require(batch >= 1 && steps >= 1, "usage: kbmla_example_decode_loop [batch >= 1] [steps >= 1]");
  const kbmla::DeviceInfo dev = kbmla::query_device();
  if (!dev.supported) {
    std::printf("no sm_90 GPU (%s): nothing to run\n", dev.reason.c_str());
    return 0;
  }

  // Heavy-tailed context lengths, as serving batches are; room for `steps` more tokens.
  std::mt19937_64 rng(24);
  std::lognormal_distribution<double> ln(8.0, 1.2);
  std::vector<int32_t> seqlens(batch);
  for (auto& L : seqlens) L = int32_t(std::clamp(ln(rng), 16.0, 100000.0));
  const int max_len = *std::max_element(seqlens.begin(), seqlens.end()) + steps;
  const int max_pages = (max_len + kPage - 1) / kPage;
  int64_t num_pages = 0;
  for (int32_t L : seqlens) num_pages += (L + steps + kPage - 1) / kPage;

  // One block table for all layers: each request's pages, in random order over the pool
  // (columns past a request's pages are never read), one cache per layer.
  std::vector<int32_t> order(static_cast<size_t>(num_pages));
  for (int64_t i = 0; i < num_pages; ++i) order[size_t(i)] = int32_t(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> table(size_t(batch) * max_pages, 0);
  size_t next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < (seqlens[b] + steps + kPage - 1) / kPage; ++j) table[size_t(b) * max_pages + j] = order[next++];
  }
  int32_t* block_table = device_alloc<int32_t>(table.size());
  check(cudaMemcpy(block_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "upload");
  std::vector<void*> caches(kLayers);
  std::vector<kbmla::KvCache> kv;
  const size_t cache_elems = size_t(num_pages) * kPage * kDqk;
  for (int l = 0; l < kLayers; ++l) {
    caches[l] = device_alloc<uint16_t>(cache_elems);
    kbmla::fill_device_random_bf16(caches[l], cache_elems, 100 + l, nullptr);
    kv.emplace_back(caches[l], num_pages, kPage, kDqk);
  }
  const size_t rows = size_t(batch) * kQLen * kHeads;
  uint16_t* q = device_alloc<uint16_t>(rows * kDqk * kLayers);
  kbmla::fill_device_random_bf16(q, rows * kDqk * kLayers, 7, nullptr);
  uint16_t* out = device_alloc<uint16_t>(rows * kDv * kLayers);
  float* lse = device_alloc<float>(rows * kLayers);
  int32_t* dev_seqlens = device_alloc<int32_t>(size_t(batch));
  int32_t* host_seqlens = nullptr;
  check(cudaMallocHost(&host_seqlens, size_t(batch) * 4), "cudaMallocHost");

  kbmla::DecodeConfig config;
  config.heads = kHeads;
  config.q_len = kQLen;
  config.softmax_scale = 1.f / std::sqrt(float(kDqk));
  const kbmla::DevicePlan plan = kbmla::DevicePlan::create_device_planned(config, batch);
  uint8_t* ws = device_alloc<uint8_t>(plan.workspace_bytes());
  kbmla::init_workspace(ws, plan.workspace_bytes(), nullptr);

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::copy(seqlens.begin(), seqlens.end(), host_seqlens);
  check(cudaMemcpyAsync(dev_seqlens, host_seqlens, size_t(batch) * 4, cudaMemcpyHostToDevice, stream), "seqlens");
  auto step = [&]() {
    plan.replan(dev_seqlens, stream);
    for (int l = 0; l < kLayers; ++l) {
      kbmla::DecodeArgs a;
      a.q = q + rows * kDqk * l;
      a.block_table = block_table;
      a.max_pages = max_pages;
      a.seqlens = dev_seqlens;
      a.out = out + rows * kDv * l;
      a.lse = lse + rows * l;
      a.workspace = ws;  // layers run in stream order, so they share one workspace
      a.workspace_bytes = plan.workspace_bytes();
      a.stream = stream;
      kbmla::decode(plan, kv[l], a);
    }
  };
  step();  // outside the graph once: module loading, tensor maps
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  step();
  check(cudaStreamEndCapture(stream, &graph), "capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  float total_ms = 0;
  for (int s = 0; s < steps; ++s) {
    for (int b = 0; b < batch; ++b) host_seqlens[b] = seqlens[b] + s;  // one new token per request
    check(cudaMemcpyAsync(dev_seqlens, host_seqlens, size_t(batch) * 4, cudaMemcpyHostToDevice, stream), "seqlens");
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "launch");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");  // host_seqlens is reused next step
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    total_ms += ms;
  }
  const uint32_t errors = kbmla::read_device_errors(ws, stream);
  const double step_us = 1e3 * total_ms / steps;
  std::printf("%s: batch %d (lognormal seqlens %d..%d), %d layers x %d heads, q_len %d, %d steps in one CUDA graph\n",
              dev.name.c_str(), batch, *std::min_element(seqlens.begin(), seqlens.end()), max_len - steps, kLayers,
              kHeads, kQLen, steps);
  std::printf("step %.1f us (replan + %d decodes), %.1f us per layer; %.0f tokens/s per layer, %.0f tokens/s for "
              "the %d-layer step; device errors: %s\n",
              step_us, kLayers, step_us / kLayers, batch / (step_us / kLayers) * 1e6, batch / step_us * 1e6, kLayers,
              kbmla::describe_device_errors(errors).c_str());
  return errors == 0 ? 0 : 1;
} catch (const kbmla::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
