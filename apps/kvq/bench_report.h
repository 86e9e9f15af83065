#pragma once
// What `kvq bench` reports: one progress line per case (stderr), a table (stdout) and the JSON
// document that keeps every number (--json), which scripts/plot_bench.py draws.
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_runner.h"
#include "kvq/core/cache_spec.h"

namespace kvq::app::bench {

struct RunInfo {
  std::string command;  // the command line, as run
  std::string date;     // UTC, ISO 8601
  std::string config_file;
  std::string backend;  // name
  std::string backend_version;
  CacheSpec cache;  // layout words and scales from the config
  Device device;
  std::string device_name;
  uint64_t copy_bytes = 0;      // buffer size of the copy-bandwidth measurement
  double copy_bytes_per_s = 0;  // read + written bytes per second
  Settings settings;
};

// "2026-12-02T09:10:11Z".
std::string utc_now_iso8601();

// Percent of the copy bandwidth that `gb_per_s` is.
double percent_of_copy(double gb_per_s, double copy_bytes_per_s);

// `complete` is false while cases are still running (the file is rewritten after each case, so a
// run cut short by a time limit still leaves its numbers).
nlohmann::json to_json(const RunInfo& info, const std::vector<CaseResult>& results,
                       bool complete = true);

// "[ 3/64] H=8 D=128 bs=16 T=64: write 4.1 us 301.2 GB/s 7.2% | graph 2.9 us | read ..."
std::string progress_line(std::size_t index, std::size_t count, const CaseResult& r,
                          double copy_bytes_per_s);

void print_table(std::ostream& out, const RunInfo& info, const std::vector<CaseResult>& results);

}  // namespace kvq::app::bench
