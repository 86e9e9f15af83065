#include "kvq/core/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "kvq/core/status.h"

namespace kvq {
namespace {

std::string reason(int err) {
  return std::strerror(err);
}

}  // namespace

std::filesystem::path temporary_path_for(const std::filesystem::path& file) {
  return std::filesystem::path(file.string() + ".tmp");
}

bool write_file_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes,
                           const std::function<bool()>& cancelled) {
  const std::filesystem::path tmp = temporary_path_for(file);
  const auto is_cancelled = [&] { return cancelled && cancelled(); };
  if (is_cancelled()) return false;
  const auto fail = [&](const std::filesystem::path& where, const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::io, fmt::format("{}: cannot {}: {}", where.string(), what, reason(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "create it", errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    if (is_cancelled()) break;
    const std::size_t chunk = std::min(bytes.size() - done, kFileWriteChunkBytes);
    const ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(tmp, "write it", err);
    }
    done += static_cast<std::size_t>(n);
  }
  // close reports the errors of a delayed write (NFS, a full disk on some file systems).
  if (::close(fd) != 0 && done == bytes.size()) fail(tmp, "write it", errno);
  if (done < bytes.size()) {  // cancelled
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    fail(file, "rename " + tmp.string() + " to it", errno);
  }
  return true;
}

bool write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           const std::function<bool()>& cancelled) {
  return write_file_atomically(file, std::as_bytes(std::span(text.data(), text.size())), cancelled);
}

void check_writable(const std::filesystem::path& file, std::string_view what) {
  const auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::invalid_argument, fmt::format("{} {}: {}", what, file.string(), why));
  };
  if (file.empty()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: expected a file path, found ''", what));
  }
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) bad("is a folder: expected a file path");
  const std::filesystem::path parent = std::filesystem::absolute(file, ec).parent_path();
  if (!std::filesystem::is_directory(parent, ec)) bad("no such folder " + parent.string());
  const std::filesystem::path tmp = temporary_path_for(file);
  const bool existed = std::filesystem::exists(tmp, ec);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) bad("cannot create " + tmp.string() + ": " + reason(errno));
  ::close(fd);
  if (!existed) ::unlink(tmp.c_str());
}

}  // namespace kvq
