#pragma once
// Progress of the prefill/decode loop on stderr: a bar redrawn in place when stderr is a terminal,
// otherwise a plain line at every 10% (logs and CI keep a readable record, not a mess of \r).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvq::demo {

class Progress {
 public:
  enum class Mode { off, bar, lines };

  // `total` units (tokens); mode bar/lines from whether `out` is a terminal unless given.
  Progress(std::FILE* out, int64_t total);
  Progress(std::FILE* out, int64_t total, Mode mode);
  ~Progress();  // finishes the bar's line if update() drew one

  // `done` units so far; `what` names the current phase ("prefill", "decode").
  void update(int64_t done, const char* what);
  // Ends the bar's line (the bar stays visible at 100%).
  void finish();

  Mode mode() const { return mode_; }

 private:
  void draw(int64_t done, const char* what);

  std::FILE* out_;
  int64_t total_;
  Mode mode_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  int last_decile_ = 0;  // lines mode: the last 10% step printed
  bool drawn_ = false;   // bar mode: a line is open
};

}  // namespace kvq::demo
