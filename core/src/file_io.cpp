#include "kvq/core/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
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

// FILE.tmp for writing, created if missing; -1 with `why` set when it cannot be. Never through a
// symbolic link (O_NOFOLLOW: a link planted at FILE.tmp would send our bytes to the file it
// names), never into anything but a plain file (O_NONBLOCK: a FIFO there fails, not hangs).
int open_temporary(const std::filesystem::path& tmp, std::string* why) {
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = errno == ELOOP ? "it is a symbolic link: expected a plain file or none" : reason(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *why = "it is not a plain file";
    return -1;
  }
  return fd;
}

// Whether `fd` is still the file at `path` (not renamed away by the writer that held it).
bool still_at(int fd, const std::filesystem::path& path) {
  struct stat open_file {};
  struct stat named {};
  return ::fstat(fd, &open_file) == 0 && ::stat(path.c_str(), &named) == 0 &&
         open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

constexpr const char* kExpectedOutput = "expected a regular file or a new path";

}  // namespace

std::string non_regular_kind(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

std::filesystem::path temporary_path_for(const std::filesystem::path& file) {
  return std::filesystem::path(file.string() + ".tmp");
}

bool write_file_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes,
                           const std::function<bool()>& cancelled) {
  return write_file_atomically(file, std::span(&bytes, 1), cancelled);
}

bool write_file_atomically(const std::filesystem::path& file,
                           std::span<const std::span<const std::byte>> pieces,
                           const std::function<bool()>& cancelled) {
  const std::filesystem::path tmp = temporary_path_for(file);
  const auto is_cancelled = [&] { return cancelled && cancelled(); };
  if (is_cancelled()) return false;
  const auto fail = [&](const std::filesystem::path& where, const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::io, fmt::format("{}: cannot {}: {}", where.string(), what, reason(err)));
  };
  if (const std::string kind = non_regular_kind(file); !kind.empty()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: is {}: {}", file.string(), kind, kExpectedOutput));
  }
  std::string why;
  const int fd = open_temporary(tmp, &why);
  if (fd < 0)
    throw Error(ErrorCode::io, fmt::format("{}: cannot create it: {}", tmp.string(), why));
  // One writer at a time: a second one (another kvq writing the same FILE) would mix its bytes
  // with ours. The lock is checked to be on the file still named FILE.tmp: one taken just after
  // its writer renamed it would be on FILE. A FILE.tmp that a dead run left holds no lock.
  const int locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
  if (locked != 0 || !still_at(fd, tmp)) {
    ::close(fd);
    if (locked != 0 && locked != EWOULDBLOCK) {
      throw Error(ErrorCode::io,
                  fmt::format("{}: cannot lock it: {}", tmp.string(), reason(locked)));
    }
    throw Error(ErrorCode::io, fmt::format("{}: another process is writing it (it holds {})",
                                           file.string(), tmp.string()));
  }
  if (::ftruncate(fd, 0) != 0) {  // a stale FILE.tmp's old bytes must not trail ours
    const int err = errno;
    ::close(fd);
    fail(tmp, "truncate it", err);
  }
  bool whole = true;  // false once cancelled
  for (const std::span<const std::byte> bytes : pieces) {
    std::size_t done = 0;
    while (whole && done < bytes.size()) {
      if (is_cancelled()) {
        whole = false;
        break;
      }
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
  }
  // On disk before the rename, so that a power loss cannot leave FILE renamed but empty; close
  // reports the errors of a delayed write (NFS, a full disk on some file systems).
  if (whole && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(tmp, "write it", err);
  }
  if (::close(fd) != 0 && whole) fail(tmp, "write it", errno);
  if (!whole) {  // cancelled
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
  if (const std::string kind = non_regular_kind(file); !kind.empty()) {
    bad(fmt::format("is {}: {}", kind, kExpectedOutput));
  }
  const std::filesystem::path parent = std::filesystem::absolute(file, ec).parent_path();
  if (!std::filesystem::is_directory(parent, ec)) bad("no such folder " + parent.string());
  const std::filesystem::path tmp = temporary_path_for(file);
  const bool existed = std::filesystem::exists(tmp, ec);
  std::string why;
  const int fd = open_temporary(tmp, &why);
  if (fd < 0) bad("cannot create " + tmp.string() + ": " + why);
  ::close(fd);
  if (!existed) ::unlink(tmp.c_str());
}

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;  // equivalent() fails when either file is missing: compare the names then
  return std::filesystem::equivalent(a, b, ec) ||
         std::filesystem::absolute(a, ec).lexically_normal() ==
             std::filesystem::absolute(b, ec).lexically_normal();
}

void check_distinct(const std::filesystem::path& output, std::string_view output_what,
                    const std::filesystem::path& input, std::string_view input_what) {
  if (input.empty()) return;
  if (same_file(output, input)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} {}: is the {} file: expected a different file", output_what,
                            output.string(), input_what));
  }
  // OUT.tmp is truncated and renamed over OUT: an input by that name would be destroyed.
  if (const auto tmp = temporary_path_for(output); same_file(tmp, input)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} {}: writes through {}, which is the {} file: expected an output "
                            "whose FILE.tmp is not an input",
                            output_what, output.string(), tmp.string(), input_what));
  }
}

}  // namespace kvq
