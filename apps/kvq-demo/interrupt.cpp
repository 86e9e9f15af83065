#include "interrupt.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "kvq/core/status.h"
#include "kvq/io/file_io.h"

namespace kvq::demo {

namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first SIGINT or SIGTERM; 0: none
// The temporary file being written, for the handler to remove on a second Ctrl-C. Fixed storage:
// a handler may not allocate. g_tmp_ready is set only while g_tmp_path holds a whole name.
char g_tmp_path[4096] = {0};
volatile std::sig_atomic_t g_tmp_ready = 0;

extern "C" void on_interrupt(int sig) {
  if (g_signal) {
    if (g_tmp_ready) ::unlink(g_tmp_path);
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
  // The temporary is FILE.tmp.XXXXXX: it must fit the handler's fixed storage.
  if (file.string().size() + 16 >= sizeof(g_tmp_path)) {
    throw Error(ErrorCode::io, fmt::format("{}: path too long", file.string()));
  }
  throw_if_interrupted();
  const auto temporary = [](const std::filesystem::path& tmp) {
    g_tmp_ready = 0;
    const std::string name = tmp.string();
    if (name.empty() || name.size() >= sizeof(g_tmp_path)) return;
    std::memcpy(g_tmp_path, name.c_str(), name.size() + 1);
    g_tmp_ready = 1;
  };
  const bool written = kvq::write_file_atomically(file, text, interrupted, temporary);
  if (!written) throw Interrupted();
}

}  // namespace kvq::demo
