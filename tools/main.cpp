// kbmla: plan | demo | check | bench.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "kbmla/error.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"kbmla: KV-balanced MLA decode attention for Hopper"};
  app.require_subcommand(1);
  std::map<std::string, kbmla::tools::Action> actions;
  actions["plan"] = kbmla::tools::add_plan_command(app);
  actions["demo"] = kbmla::tools::add_demo_command(app);
  actions["bench"] = kbmla::tools::add_bench_command(app);
  actions["check"] = kbmla::tools::add_check_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
