// kvq layout -- placeholder until its issue lands: refuses with a clear message.
#include "commands.h"
#include "kvq/core/status.h"

namespace kvq::app {

void add_layout_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("layout", "(not built yet)");
  sub->allow_extras();
  sub->callback([&run] {
    run = []() -> int { throw Error(ErrorCode::runtime, "'kvq layout' is not implemented yet"); };
  });
}

}  // namespace kvq::app
