// kvq: inspect layouts, validate configs, list backends, write/read caches, benchmark.
#include "commands.h"
#include "kvq/core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"kvq: NVFP4 paged KV-cache writer tools", "kvq"};
  app.set_version_flag("--version", KVQ_VERSION_STRING);
  app.require_subcommand(1);
  kvq::app::Runner run;
  kvq::app::add_backends_command(app, run);
  kvq::app::add_check_command(app, run);
  kvq::app::add_layout_command(app, run);
  kvq::app::add_write_command(app, run);
  kvq::app::add_read_command(app, run);
  kvq::app::add_bench_command(app, run);
  return kvq::app::run_main(app, run, argc, argv);
}
