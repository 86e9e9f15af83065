// kvq: inspect layouts, validate configs, list backends, write/read caches, benchmark.
#include "commands.h"
#include "kvq/core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kvq: NVFP4 paged KV-cache writer tools", "kvq"};
  app.set_version_flag("--version", KVQ_VERSION_STRING, "Print the kvq version and exit");
  app.require_subcommand(1);
  app.footer(
      "Each command takes --plugin-path DIR, --log-level LEVEL and --version (kvq COMMAND "
      "--help).\n"
      "Exit status: 0 success, 1 runtime failure, 2 bad usage, bad config or bad input file.\n"
      "Environment: KVQ_LOG_LEVEL (trace|debug|info|warn|error|off), KVQ_PLUGIN_PATH (folders,\n"
      "  colon separated, searched for backend plugins).");
  kvq::app::Runner run;
  kvq::app::add_backends_command(app, run);
  kvq::app::add_check_command(app, run);
  kvq::app::add_layout_command(app, run);
  kvq::app::add_write_command(app, run);
  kvq::app::add_read_command(app, run);
  kvq::app::add_bench_command(app, run);
  kvq::app::add_calibrate_command(app, run);
  kvq::app::add_attend_command(app, run);
  return kvq::app::run_main(app, run, argc, argv);
}
