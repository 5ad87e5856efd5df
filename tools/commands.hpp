// Sub-commands of the `kbmla` tool. Each registers its options on the CLI11 app and
// returns the action to run when selected.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "kbmla/planner_core.hpp"

namespace kbmla::tools {

using Action = std::function<int()>;

// --cost-block / --cost-item / --cost-split: override the planner's cost model (ns).
inline void add_cost_options(CLI::App* cmd, CostModel& cost) {
  const auto range = CLI::Range(int64_t{1}, int64_t{1} << 32);
  cmd->add_option("--cost-block", cost.per_kv_block, "Cost model: ns per 64-token KV block per CTA")->check(range);
  cmd->add_option("--cost-item", cost.per_item, "Cost model: ns per work item")->check(range);
  cmd->add_option("--cost-split", cost.per_split, "Cost model: extra ns per item of a split request")->check(range);
}

// `base` with each field the cost flags set (non-zero) replaced: the decode's model for the
// case's dtype and rows is the base of kbmla plan and kbmla bench alike.
inline CostModel cost_with_flags(CostModel base, const CostModel& flags) {
  if (flags.per_kv_block > 0) base.per_kv_block = flags.per_kv_block;
  if (flags.per_item > 0) base.per_item = flags.per_item;
  if (flags.per_split > 0) base.per_split = flags.per_split;
  return base;
}

Action add_plan_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_check_command(CLI::App& app);

}  // namespace kbmla::tools
