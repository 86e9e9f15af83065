#include "progress.h"

#include <unistd.h>

#include <algorithm>

namespace kvq::demo {

Progress::Progress(std::FILE* out, int64_t total)
    : Progress(out, total, isatty(fileno(out)) ? Mode::bar : Mode::lines) {}

Progress::Progress(std::FILE* out, int64_t total, Mode mode)
    : out_(out),
      total_(std::max<int64_t>(total, 1)),
      mode_(mode),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  finish();
}

void Progress::update(int64_t done, const char* what) {
  if (mode_ == Mode::off) return;
  const auto now = std::chrono::steady_clock::now();
  if (mode_ == Mode::bar) {
    // Redraw at most 20 times a second, and always at the end.
    if (done < total_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
    last_draw_ = now;
    draw(done, what);
    return;
  }
  const int decile = static_cast<int>(std::min<int64_t>(done * 10 / total_, 10));
  if (decile <= last_decile_) return;
  last_decile_ = decile;
  const double s = std::chrono::duration<double>(now - start_).count();
  std::fprintf(out_, "kvq-demo: %3d%% (%lld/%lld tokens written, %s, %.1f s)\n", decile * 10,
               static_cast<long long>(done), static_cast<long long>(total_), what, s);
  std::fflush(out_);
}

void Progress::draw(int64_t done, const char* what) {
  constexpr int kWidth = 30;
  const int64_t clamped = std::min(done, total_);
  const int filled = static_cast<int>(clamped * kWidth / total_);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(out_, "\r\033[Kkvq-demo [%s] %3d%% %lld/%lld tokens  %-7s %.1f s", bar,
               static_cast<int>(clamped * 100 / total_), static_cast<long long>(done),
               static_cast<long long>(total_), what, s);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::finish() {
  if (mode_ == Mode::bar && drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    drawn_ = false;
  }
}

}  // namespace kvq::demo
