// kvq bench -- placeholder until its issue lands: refuses with a clear message.
#include "commands.h"
#include "kvq/core/status.h"

namespace kvq::app {

void add_bench_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("bench", "(not built yet)");
  sub->allow_extras();
  sub->callback([&run] {
    run = []() -> int { throw Error(ErrorCode::runtime, "'kvq bench' is not implemented yet"); };
  });
}

}  // namespace kvq::app
