// Sub-commands of the `kbmla` tool. Each registers its options on the CLI11 app and
// returns the action to run when selected.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace kbmla::tools {

using Action = std::function<int()>;

Action add_plan_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_bench_command(CLI::App& app);

}  // namespace kbmla::tools
