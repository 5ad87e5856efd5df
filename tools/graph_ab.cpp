#include "tools/graph_ab.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "tools/bench_timing.hpp"

namespace kbmla::tools {

cudaGraphExec_t capture_call_graph(cudaStream_t stream, const std::function<void()>& call) {
  cudaGraph_t graph = nullptr;
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  try {
    call();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda_check(inst, "graph instantiate");
  return exec;
}

std::vector<GraphAbRound> run_graph_ab(int rounds, int runs, int warmup, int cool_ms, cudaStream_t stream,
                                       const BenchCall& call, ClockProbe& probe) {
  const GraphExec full{capture_call_graph(stream, [&] { call(true); })};
  const GraphExec decode_only{capture_call_graph(stream, [&] { call(false); })};
  auto cool = [&] {
    if (cool_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cool_ms));
  };
  auto replay = [&](cudaGraphExec_t exec) {
    return [&, exec](int) { cuda_check(cudaGraphLaunch(exec, stream), "graph launch"); };
  };
  std::vector<GraphAbRound> out;
  for (int round = 0; round < rounds; ++round) {
    GraphAbRound& r = out.emplace_back();
    // The full call's two kinds swap places every round, so that neither always runs first.
    const bool graph_first = round % 2 == 1;
    auto eager_full = [&] {
      cool();
      probe.start();
      r.eager_us = median_us([&](int) { call(true); }, runs, warmup, stream);
      r.eager_mhz = probe.stop().mean_sm_mhz;
    };
    auto graph_full = [&] {
      cool();
      probe.start();
      r.graph_us = median_us(replay(full.exec), runs, warmup, stream);
      r.graph_mhz = probe.stop().mean_sm_mhz;
    };
    if (graph_first) {
      graph_full();
      eager_full();
    } else {
      eager_full();
      graph_full();
    }
    cool();
    r.eager_decode_us = median_us([&](int) { call(false); }, runs, warmup, stream);
    cool();
    r.graph_decode_us = median_us(replay(decode_only.exec), runs, warmup, stream);
  }
  return out;
}

nlohmann::json print_graph_ab(const std::string& case_name, const std::vector<GraphAbRound>& rounds) {
  nlohmann::json out = nlohmann::json::array();
  for (const GraphAbRound& g : rounds) {
    fmt::print("  graph-ab {}: eager {:.1f} graph {:.1f} us (SM {:.0f} / {:.0f} MHz); decode alone eager {:.1f} graph "
               "{:.1f} us\n",
               case_name, g.eager_us, g.graph_us, g.eager_mhz, g.graph_mhz, g.eager_decode_us, g.graph_decode_us);
    out.push_back({{"eager_us", g.eager_us},
                   {"graph_us", g.graph_us},
                   {"eager_decode_us", g.eager_decode_us},
                   {"graph_decode_us", g.graph_decode_us},
                   {"eager_sm_mhz", g.eager_mhz},
                   {"graph_sm_mhz", g.graph_mhz}});
  }
  return out;
}

}  // namespace kbmla::tools
