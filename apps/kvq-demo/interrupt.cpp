#include "interrupt.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "kvq/core/file_io.h"
#include "kvq/core/status.h"

namespace kvq::demo {

namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first SIGINT or SIGTERM; 0: none
// The temporary file being written, for the handler to remove on a second Ctrl-C. Fixed storage:
// a handler may not allocate.
char g_tmp_path[4096] = {0};

extern "C" void on_interrupt(int sig) {
  if (g_signal) {
    if (g_tmp_path[0]) ::unlink(g_tmp_path);
    ::_exit(128 + g_signal);
  }
  g_signal = sig;
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR and the loop notices sooner
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);  // kill, timeout, a job scheduler: stopped the same way
}

bool interrupted() noexcept {
  return g_signal != 0;
}

int interrupted_exit_status() noexcept {
  return 128 + (g_signal != 0 ? g_signal : SIGINT);
}

void throw_if_interrupted() {
  if (interrupted()) throw Interrupted();
}

void write_file_atomically(const std::filesystem::path& file, std::string_view text) {
  const std::string tmp = temporary_path_for(file).string();
  if (tmp.size() >= sizeof(g_tmp_path)) {
    throw Error(ErrorCode::io, fmt::format("{}: path too long", file.string()));
  }
  throw_if_interrupted();
  std::memcpy(g_tmp_path, tmp.c_str(), tmp.size() + 1);
  bool written = false;
  try {
    written = kvq::write_file_atomically(file, text, interrupted);
  } catch (...) {
    g_tmp_path[0] = '\0';
    throw;
  }
  g_tmp_path[0] = '\0';
  if (!written) throw Interrupted();
}

}  // namespace kvq::demo
