#include "interrupt.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "kvq/core/status.h"

namespace kvq::demo {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
// The temporary file being written, for the handler to remove on a second Ctrl-C. Fixed storage:
// a handler may not allocate.
char g_tmp_path[4096] = {0};

extern "C" void on_interrupt(int) {
  if (g_interrupted) {
    if (g_tmp_path[0]) ::unlink(g_tmp_path);
    ::_exit(kExitInterrupted);
  }
  g_interrupted = 1;
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR and the loop notices sooner
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() noexcept {
  return g_interrupted != 0;
}

void throw_if_interrupted() {
  if (interrupted()) throw Interrupted();
}

void write_file_atomically(const std::filesystem::path& file, std::string_view text) {
  const std::string tmp = file.string() + ".tmp";
  if (tmp.size() >= sizeof(g_tmp_path)) {
    throw Error(ErrorCode::io, fmt::format("{}: path too long", file.string()));
  }
  throw_if_interrupted();
  std::memcpy(g_tmp_path, tmp.c_str(), tmp.size() + 1);
  auto forget_tmp = [] { g_tmp_path[0] = '\0'; };
  auto fail = [&](const std::string& where, const std::string& what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    forget_tmp();
    throw Error(ErrorCode::io, fmt::format("{}: cannot {}: {}", where, what, std::strerror(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "create it");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      if (interrupted()) break;
      continue;
    }
    if (n < 0) {
      ::close(fd);
      fail(tmp, "write it");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && !interrupted()) fail(tmp, "write it");
  if (interrupted()) {
    ::unlink(tmp.c_str());
    forget_tmp();
    throw Interrupted();
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) fail(file.string(), "rename " + tmp + " to it");
  forget_tmp();
}

}  // namespace kvq::demo
