// `kbmla bench --graph-ab N`: the same call eager and replayed from a CUDA graph, with and
// without its combine, in N alternated rounds (each measurement from an idle GPU), so that
// a graph figure and an eager one differ only by how the call was launched, neither always
// first (the plain --graph figure, timed after the eager one, looked 3-8 % slower on the
// 96-head cases until it too waited for an idle GPU: bench/NOTES.md v55).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/clock_probe.hpp"

namespace kbmla::tools {

// A call as the bench makes it; with_combine false: the decode alone (split requests'
// outputs unwritten).
using BenchCall = std::function<void(bool with_combine)>;

// The call captured from `stream` into an instantiated graph (throws with the capture ended).
cudaGraphExec_t capture_call_graph(cudaStream_t stream, const std::function<void()>& call);

// An instantiated graph, destroyed with its scope (a timed run may throw).
struct GraphExec {
  cudaGraphExec_t exec;
  explicit GraphExec(cudaGraphExec_t e) : exec(e) {}
  ~GraphExec() { cudaGraphExecDestroy(exec); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
};

struct GraphAbRound {
  double eager_us = 0, graph_us = 0;                // decode + combine
  double eager_decode_us = 0, graph_decode_us = 0;  // the decode alone
  double eager_mhz = 0, graph_mhz = 0;              // mean SM clock of the full call's runs (0: no NVML)
};

std::vector<GraphAbRound> run_graph_ab(int rounds, int runs, int warmup, int cool_ms, cudaStream_t stream,
                                       const BenchCall& call, ClockProbe& probe);

// One line per round on stdout; the rounds as JSON (the case's "graph_ab").
nlohmann::json print_graph_ab(const std::string& case_name, const std::vector<GraphAbRound>& rounds);

}  // namespace kbmla::tools
