#include "plugin_file_checks.h"

#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <link.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "kvq/core/status.h"

namespace kvq::detail {
namespace {

namespace fs = std::filesystem;

// This host's ELF identity: what a library must say to be loadable here.
#if defined(__LP64__)
constexpr unsigned char kHostClass = ELFCLASS64;
#else
constexpr unsigned char kHostClass = ELFCLASS32;
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif
#if defined(__x86_64__)
constexpr int kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kHostMachine = EM_AARCH64;
#elif defined(__i386__)
constexpr int kHostMachine = EM_386;
#elif defined(__powerpc64__)
constexpr int kHostMachine = EM_PPC64;
#else
constexpr int kHostMachine = -1;  // not checked: dlopen says so
#endif

std::string class_name(unsigned char c) {
  return c == ELFCLASS32 ? "32-bit" : c == ELFCLASS64 ? "64-bit" : fmt::format("class {}", c);
}

std::string machine_name(int m) {
  switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64";
    case EM_386: return "i386";
    case EM_ARM: return "ARM";
    case EM_PPC64: return "PowerPC64";
    case EM_RISCV: return "RISC-V";
    default: return fmt::format("ELF machine {}", m);
  }
}

// Reads exactly `size` bytes at `offset`; false when the file is shorter or the read fails.
bool read_at(int fd, void* out, std::size_t size, uint64_t offset) {
  auto* bytes = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Whether [offset, offset + size) lies within a file of `file_size` bytes (no overflow).
bool within(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string user_name(uid_t uid) {
  std::vector<char> buffer(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == 0 && found) {
    return found->pw_name;
  }
  return {};
}

std::string group_name(gid_t gid) {
  std::vector<char> buffer(16384);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buffer.data(), buffer.size(), &found) == 0 && found) {
    return found->gr_name;
  }
  return {};
}

std::string shown_user(uid_t uid) {
  const std::string name = user_name(uid);
  return name.empty() ? fmt::format("uid {}", uid) : fmt::format("'{}' (uid {})", name, uid);
}

std::string shown_group(gid_t gid) {
  const std::string name = group_name(gid);
  return name.empty() ? fmt::format("gid {}", gid) : fmt::format("'{}' (gid {})", name, gid);
}

// Who other than root and the user running kvq can change what `st` describes: "" for nobody.
// The group of a group-writable file is harmless when it is root's (gid 0) or its owner's own
// (a group named like the owner, where umask 002 is the custom: nobody else is in it).
std::string other_writers(const struct stat& st) {
  if ((st.st_mode & S_IWOTH) != 0) return "writable by every user";
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return "owned by " + shown_user(st.st_uid) + ", another user";
  }
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0) {
    const std::string owner = user_name(st.st_uid);
    if (owner.empty() || group_name(st.st_gid) != owner) {
      return "writable by the group " + shown_group(st.st_gid);
    }
  }
  return {};
}

std::string mode_text(const struct stat& st) {
  return fmt::format("{:04o}", st.st_mode & 07777);
}

}  // namespace

bool insecure_plugins_allowed() {
  const char* env = std::getenv(kAllowInsecurePluginsEnv);
  return env != nullptr && std::string_view(env) == "1";
}

std::string elf_header_refusal(const fs::path& file) {
  Fd f;
  f.fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) return {};  // dlopen then says why it cannot be opened
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const auto size = static_cast<uint64_t>(st.st_size);

  unsigned char ident[EI_NIDENT] = {};
  if (!read_at(f.fd, ident, sizeof ident, 0) || std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    // No ELF magic (or fewer than 16 bytes): dlopen reads it, maps nothing and refuses it.
    if (size >= SELFMAG && read_at(f.fd, ident, SELFMAG, 0) &&
        std::memcmp(ident, ELFMAG, SELFMAG) == 0) {
      return fmt::format(
          "truncated ELF file: {} bytes, shorter than its {}-byte identification: expected a "
          "complete shared library",
          size, EI_NIDENT);
    }
    return {};
  }
  if (ident[EI_CLASS] != kHostClass) {
    return fmt::format("a {} ELF file: expected a {} shared library for this host",
                       class_name(ident[EI_CLASS]), class_name(kHostClass));
  }
  if (ident[EI_DATA] != kHostData) {
    return fmt::format("an ELF file of byte order {}: expected {} ({}) for this host",
                       ident[EI_DATA], kHostData,
                       kHostData == ELFDATA2LSB ? "little-endian" : "big-endian");
  }
  ElfW(Ehdr) header{};
  if (!read_at(f.fd, &header, sizeof header, 0)) {
    return fmt::format(
        "truncated ELF file: {} bytes, shorter than its {}-byte header: expected a complete "
        "shared library",
        size, sizeof header);
  }
  if (header.e_type != ET_DYN) {
    return fmt::format("ELF type {}: expected a shared object (ET_DYN {})", header.e_type,
                       static_cast<int>(ET_DYN));
  }
  if (kHostMachine >= 0 && header.e_machine != kHostMachine) {
    return fmt::format("built for {}: expected a shared library for {}",
                       machine_name(header.e_machine), machine_name(kHostMachine));
  }
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(ElfW(Phdr))) {
    return fmt::format(
        "corrupt ELF header: {} program headers of {} bytes: expected at least one of {} bytes",
        header.e_phnum, header.e_phentsize, sizeof(ElfW(Phdr)));
  }
  const uint64_t table_bytes = uint64_t{header.e_phnum} * sizeof(ElfW(Phdr));
  if (!within(header.e_phoff, table_bytes, size)) {
    return fmt::format(
        "truncated ELF file: its program headers end at byte {}, the file has {} bytes: expected "
        "a complete shared library",
        header.e_phoff + table_bytes, size);
  }
  std::vector<ElfW(Phdr)> segments(header.e_phnum);
  if (!read_at(f.fd, segments.data(), table_bytes, header.e_phoff)) {
    return fmt::format("cannot read its ELF program headers ({} bytes at byte {})", table_bytes,
                       header.e_phoff);
  }
  // Every segment, not only the loadable ones: PT_DYNAMIC, PT_NOTE and PT_GNU_PROPERTY are read
  // through the mapping of the segment that holds them.
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const ElfW(Phdr)& s = segments[i];
    if (s.p_filesz == 0) continue;
    if (!within(s.p_offset, s.p_filesz, size)) {
      return fmt::format(
          "truncated ELF file: {}segment {} covers bytes [{}, {}), the file has {} bytes: "
          "expected a complete shared library",
          s.p_type == PT_LOAD ? "loadable " : "", i, s.p_offset,
          s.p_offset > UINT64_MAX - s.p_filesz ? UINT64_MAX : s.p_offset + s.p_filesz, size);
    }
  }
  return {};
}

std::string permission_refusal(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return {};  // opening it reports why
  const auto refuse = [&](const std::string& what, const fs::path& path, const struct stat& s,
                          const char* fix) {
    return fmt::format(
        "insecure: {} {} is {} (mode {}): another user could change the code kvq would run; {} "
        "or set {}=1 to load it anyway",
        what, message_text(path.string(), 4096), other_writers(s), mode_text(s), fix,
        kAllowInsecurePluginsEnv);
  };
  if (!other_writers(st).empty()) {
    return refuse("the file", file, st, "make it writable by its owner only (chmod go-w)");
  }
  const fs::path folder = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) == 0 && !other_writers(dir).empty()) {
    return refuse("its folder", folder, dir,
                  "move it to a folder only its owner can write (chmod go-w on the folder)");
  }
  return {};
}

std::string plugin_file_refusal(const fs::path& file, bool allow_insecure) {
  if (!allow_insecure) {
    if (std::string why = permission_refusal(file); !why.empty()) return why;
  }
  return elf_header_refusal(file);
}

}  // namespace kvq::detail
