#include "kvq/io/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "kvq/core/logging.h"
#include "kvq/core/status.h"

namespace kvq {
namespace {

std::string reason(int err) {
  return std::strerror(err);
}

// A new temporary file FILE.tmp.XXXXXX in FILE's folder: a name no file had (O_EXCL, as mkstemp
// does, so never an existing file, a symbolic link or a FIFO), with mode 0644 less the umask (the
// mode any new output gets; mkstemp would give 0600). -1 with `why` set when it cannot be made.
int create_temporary(const std::filesystem::path& file, std::filesystem::path* tmp,
                     std::string* why) {
  static constexpr char kLetters[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random{std::random_device{}() ^ static_cast<uint64_t>(::getpid())
                                                                   << 32};
  int err = EEXIST;
  for (int attempt = 0; attempt < 100 && err == EEXIST; ++attempt) {
    std::string name = file.string() + kTemporaryInfix;
    for (int i = 0; i < 6; ++i) name += kLetters[random() % (sizeof kLetters - 1)];
    *tmp = name;
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    err = errno;
  }
  *tmp = file.string() + kTemporaryInfix + "XXXXXX";
  *why = reason(err);
  return -1;
}

// Whether the name is one of FILE's temporaries: FILE.tmp.XXXXXX, or FILE.tmp as kvq named its
// only temporary before each writer had its own.
bool is_temporary_name(const std::string& name, const std::string& base) {
  const std::string prefix = base + kTemporaryInfix;
  if (name == base + ".tmp") return true;
  return name.size() == prefix.size() + 6 && name.starts_with(prefix);
}

constexpr const char* kExpectedOutput = "expected a regular file or a new path";

}  // namespace

std::vector<std::filesystem::path> temporary_files_of(const std::filesystem::path& file) {
  std::vector<std::filesystem::path> found;
  const std::string base = file.filename().string();
  if (base.empty()) return found;
  std::error_code ec;
  const std::filesystem::path folder = file.parent_path().empty() ? "." : file.parent_path();
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (is_temporary_name(it->path().filename().string(), base)) {
      found.push_back(file.parent_path() / it->path().filename());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<std::filesystem::path> stale_temporary_files_of(const std::filesystem::path& file) {
  std::vector<std::filesystem::path> stale;
  for (const std::filesystem::path& tmp : temporary_files_of(file)) {
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    // A writer at work holds its temporary's lock until its rename.
    const bool unlocked =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_SH | LOCK_NB) == 0;
    ::close(fd);
    if (unlocked) stale.push_back(tmp);
  }
  return stale;
}

bool write_file_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes,
                           const std::function<bool()>& cancelled,
                           const TemporaryFileFn& temporary) {
  return write_file_atomically(file, std::span(&bytes, 1), cancelled, temporary);
}

bool write_file_atomically(const std::filesystem::path& file,
                           std::span<const std::span<const std::byte>> pieces,
                           const std::function<bool()>& cancelled,
                           const TemporaryFileFn& temporary) {
  const auto is_cancelled = [&] { return cancelled && cancelled(); };
  if (is_cancelled()) return false;
  if (const std::string kind = non_regular_kind(file); !kind.empty()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: is {}: {}", file.string(), kind, kExpectedOutput));
  }
  // Never reused (another writer may be at work in one), but said: one can be gigabytes.
  for (const std::filesystem::path& stale : stale_temporary_files_of(file)) {
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(stale, ec);
    KVQ_LOG_WARN(
        "{}: a temporary file ({} bytes) left by a write of {} that did not "
        "finish; kvq never reuses it: remove it to free the space",
        message_text(stale.string(), 4096), ec ? 0 : size, message_text(file.string(), 4096));
  }
  std::filesystem::path tmp;
  std::string why;
  const int fd = create_temporary(file, &tmp, &why);
  if (fd < 0) {
    throw Error(ErrorCode::io, fmt::format("{}: cannot create a temporary file {} beside it: {}",
                                           file.string(), tmp.string(), why));
  }
  // Tells `temporary` the name now, and that it is gone when this call ends, whichever way.
  struct Told {
    const TemporaryFileFn& fn;
    ~Told() {
      if (!fn) return;
      try {
        fn({});
      } catch (...) {  // a destructor must not throw; the caller only loses a notice
      }
    }
  } told{temporary};
  if (temporary) temporary(tmp);
  const auto fail = [&](const std::filesystem::path& where, const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::io, fmt::format("{}: cannot {}: {}", where.string(), what, reason(err)));
  };
  // Held until the rename: a temporary that no writer locks is one a dead run left
  // (stale_temporary_files_of).
  (void)::flock(fd, LOCK_EX | LOCK_NB);
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
  // On disk before the rename, so that a power loss cannot leave FILE renamed but empty.
  if (whole && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(tmp, "write it", err);
  }
  // Asked once more with every byte on disk: the last moment a cancellation leaves FILE as it was.
  if (whole && is_cancelled()) whole = false;
  // close reports the errors of a delayed write (NFS, a full disk on some file systems).
  if (::close(fd) != 0 && whole) fail(tmp, "write it", errno);
  if (!whole) {  // cancelled
    ::unlink(tmp.c_str());
    return false;
  }
  // The name is this writer's alone (made with O_EXCL), so no other writer can have opened,
  // truncated or refilled it: what lands at FILE is exactly the bytes written above.
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    fail(file, "rename " + tmp.string() + " to it", errno);
  }
  return true;
}

bool write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           const std::function<bool()>& cancelled,
                           const TemporaryFileFn& temporary) {
  return write_file_atomically(file, std::as_bytes(std::span(text.data(), text.size())), cancelled,
                               temporary);
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
  std::filesystem::path tmp;
  std::string why;
  const int fd = create_temporary(file, &tmp, &why);
  if (fd < 0) bad("cannot create a temporary file " + tmp.string() + " beside it: " + why);
  ::close(fd);
  ::unlink(tmp.c_str());
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
}

}  // namespace kvq
