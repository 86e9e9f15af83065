#pragma once
// The `kvq` subcommands, one file each (cmd_*.cpp). Each adds its subcommand to `app` and, when
// it is the one chosen, sets `run` to its work.
#include "../common/cli.h"

namespace kvq::app {

void add_backends_command(CLI::App& app, Runner& run);   // cmd_backends.cpp
void add_check_command(CLI::App& app, Runner& run);      // cmd_check.cpp
void add_layout_command(CLI::App& app, Runner& run);     // cmd_layout.cpp
void add_write_command(CLI::App& app, Runner& run);      // cmd_write.cpp
void add_read_command(CLI::App& app, Runner& run);       // cmd_read.cpp
void add_bench_command(CLI::App& app, Runner& run);      // cmd_bench.cpp
void add_calibrate_command(CLI::App& app, Runner& run);  // cmd_calibrate.cpp
void add_attend_command(CLI::App& app, Runner& run);     // cmd_attend.cpp

}  // namespace kvq::app
