// Plugin files that must never reach dlopen, or must fail there as a load error: truncated and
// foreign ELF files (mapped past their end they kill the process with SIGBUS), a plugin with a
// function no library defines (bound lazily it kills the process at its first call), and files
// another user could change (refused unless KVQ_ALLOW_INSECURE_PLUGINS=1). Each is made here from
// the fixtures (tests/plugin/CMakeLists.txt), and each must come back as a failure naming the file
// and the reason: in a Registry in this process, and under "not loaded" in `kvq backends`.
#include <elf.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "kvq/core/registry.h"
#include "test_support.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;
using test::fixture;
using test::fixture_dir;
using test::run_command;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kAllowEnv = "KVQ_ALLOW_INSECURE_PLUGINS";

std::string good_bytes() {
  std::ifstream in(fixture("good", "libkvq_fixture_good.so"), std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A folder of its own (mode 0755 whatever the umask) for one case, removed at the end.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("kvq-hostile-" + name + "-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms(0755));
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

  // Writes `bytes` as FILE (mode 0755) and returns its path.
  fs::path put(const std::string& file, const std::string& bytes) const {
    const fs::path p = path_ / file;
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    fs::permissions(p, fs::perms(0755));
    return p;
  }

 private:
  fs::path path_;
};

// Sets or unsets KVQ_ALLOW_INSECURE_PLUGINS while alive, then restores it.
class AllowInsecure {
 public:
  explicit AllowInsecure(const char* value) {
    if (const char* old = std::getenv(kAllowEnv)) old_ = old;
    if (value) {
      ::setenv(kAllowEnv, value, 1);
    } else {
      ::unsetenv(kAllowEnv);
    }
  }
  ~AllowInsecure() {
    if (old_) {
      ::setenv(kAllowEnv, old_->c_str(), 1);
    } else {
      ::unsetenv(kAllowEnv);
    }
  }
  AllowInsecure(const AllowInsecure&) = delete;
  AllowInsecure& operator=(const AllowInsecure&) = delete;

 private:
  std::optional<std::string> old_;
};

// The reason the one file scanned in `dir` was not loaded ("" and a test failure otherwise).
std::string only_failure(const fs::path& dir) {
  Registry r;
  r.scan({dir});
  EXPECT_TRUE(r.plugins().empty()) << "loaded " << r.plugins().front().name;
  EXPECT_EQ(r.failures().size(), 1u);
  return r.failures().empty() ? std::string() : r.failures().front().reason;
}

bool loads(const fs::path& dir) {
  Registry r;
  r.scan({dir});
  for (const auto& f : r.failures()) ADD_FAILURE() << f.file << ": " << f.reason;
  return r.plugins().size() == 1;
}

std::string kvq_backends(const fs::path& dir) {
  return std::string("env -u ") + kAllowEnv + " timeout 60 '" + KVQ_BINARY +
         "' backends --plugin-path '" + dir.string() + "'";
}

// Where the ELF file's segments and program headers end: a copy cut one byte short of either is
// a file whose mapping would run past its end.
struct ElfEnds {
  uint64_t program_headers = 0;
  uint64_t last_segment = 0;
};

ElfEnds elf_ends(const std::string& bytes) {
  ElfW(Ehdr) header{};
  std::memcpy(&header, bytes.data(), sizeof header);
  ElfEnds ends;
  ends.program_headers = header.e_phoff + uint64_t{header.e_phnum} * sizeof(ElfW(Phdr));
  for (int i = 0; i < header.e_phnum; ++i) {
    ElfW(Phdr) ph{};
    std::memcpy(&ph, bytes.data() + header.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD) {
      ends.last_segment = std::max<uint64_t>(ends.last_segment, ph.p_offset + ph.p_filesz);
    }
  }
  return ends;
}

TEST(HostilePlugin, TruncatedCopiesAreListedNotLoaded) {
  const AllowInsecure unset(nullptr);
  const std::string bytes = good_bytes();
  ASSERT_GT(bytes.size(), 4096u);
  const ElfEnds ends = elf_ends(bytes);
  ASSERT_GT(ends.last_segment, ends.program_headers);
  ASSERT_LE(ends.last_segment, bytes.size());
  for (const uint64_t cut : {uint64_t{10}, uint64_t{40}, ends.program_headers - 1,
                             ends.last_segment / 2, ends.last_segment - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    const ScratchDir dir("cut");
    dir.put("libkvq_cut.so", bytes.substr(0, cut));
    EXPECT_THAT(only_failure(dir.path()), HasSubstr("truncated ELF file: "));
  }
}

// The command of the report: a truncated plugin in a searched folder took every command down
// with SIGBUS (exit 135, no message); it is now one line under "not loaded", and the installed
// plugins are still listed beside it.
TEST(HostilePlugin, BackendsListsATruncatedPluginAndGoesOn) {
  const std::string bytes = good_bytes();
  const ScratchDir dir("backends-cut");
  const fs::path cut = dir.put("libkvq_x.so", bytes.substr(0, elf_ends(bytes).last_segment / 2));
  const auto r = run_command(kvq_backends(dir.path()));
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nnot loaded:\n  " + cut.string() + ": truncated ELF file: "));
  EXPECT_THAT(r.out, HasSubstr("\nreference_cpu "));
}

TEST(HostilePlugin, ForeignElfFilesAreNamed) {
  const AllowInsecure unset(nullptr);
  const std::string bytes = good_bytes();
  const auto patched = [&](std::size_t at, const void* value, std::size_t size) {
    std::string b = bytes;
    std::memcpy(b.data() + at, value, size);
    return b;
  };
  const unsigned char class32 = ELFCLASS32;
  const uint16_t s390 = EM_S390;  // a machine kvq is built for nowhere
  const uint16_t exec = ET_EXEC;
  const struct {
    std::string bytes;
    std::string expected;
  } cases[] = {
      {patched(EI_CLASS, &class32, 1), "a 32-bit ELF file: expected a 64-bit shared library"},
      {patched(offsetof(ElfW(Ehdr), e_machine), &s390, 2), "built for ELF machine 22: expected "},
      {patched(offsetof(ElfW(Ehdr), e_type), &exec, 2), "ELF type 2: expected a shared object"},
  };
  for (const auto& c : cases) {
    const ScratchDir dir("foreign");
    dir.put("libkvq_foreign.so", c.bytes);
    EXPECT_THAT(only_failure(dir.path()), HasSubstr(c.expected));
  }
}

// A plugin whose constructor calls a function that no library defines: opened lazily, the host
// died with "symbol lookup error" (exit 127) before kvq could say anything.
TEST(HostilePlugin, MissingFunctionIsALoadError) {
  const AllowInsecure unset(nullptr);
  const fs::path file = fixture("missing_symbol", "libkvq_fixture_missing_symbol.so");
  EXPECT_THAT(only_failure(fixture_dir("missing_symbol")),
              HasSubstr("kvq_fixture_function_nobody_defines"));
  const auto r = run_command(kvq_backends(fixture_dir("missing_symbol")));
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nnot loaded:\n  " + file.string() +
                               ": cannot be loaded as a shared library (dlopen: "));
  EXPECT_THAT(r.out, HasSubstr("undefined symbol: kvq_fixture_function_nobody_defines"));
}

TEST(HostilePlugin, WorldWritableFolderIsRefusedUnlessAllowed) {
  const ScratchDir dir("world-writable");
  dir.put("libkvq_open.so", good_bytes());
  for (const auto mode : {fs::perms(0777), fs::perms(01777)}) {
    fs::permissions(dir.path(), mode);
    {
      const AllowInsecure unset(nullptr);
      const std::string why = only_failure(dir.path());
      EXPECT_THAT(why, HasSubstr("insecure: its folder " + dir.path().string() +
                                 " is writable by every user (mode "));
      EXPECT_THAT(why, HasSubstr("KVQ_ALLOW_INSECURE_PLUGINS=1"));
    }
    {
      const AllowInsecure other("yes");  // only "1" opts in
      EXPECT_THAT(only_failure(dir.path()), HasSubstr("insecure: "));
    }
    const AllowInsecure allow("1");
    EXPECT_TRUE(loads(dir.path()));
  }
  fs::permissions(dir.path(), fs::perms(0777));
  const auto r = run_command(kvq_backends(dir.path()));
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nnot loaded:\n  " + (dir.path() / "libkvq_open.so").string() +
                               ": insecure: its folder " + dir.path().string() +
                               " is writable by every user (mode 0777)"));
  fs::permissions(dir.path(), fs::perms(0755));
}

TEST(HostilePlugin, FileWritableByAnotherUserIsRefused) {
  const AllowInsecure unset(nullptr);
  const ScratchDir dir("writable-file");
  const fs::path file = dir.put("libkvq_file.so", good_bytes());
  fs::permissions(file, fs::perms(0666));
  EXPECT_THAT(only_failure(dir.path()),
              HasSubstr("insecure: the file " + file.string() +
                        " is writable by every user (mode 0666): another user could change the "
                        "code kvq would run; make it writable by its owner only (chmod go-w) or "
                        "set KVQ_ALLOW_INSECURE_PLUGINS=1 to load it anyway"));
  fs::permissions(file, fs::perms(0755));
  EXPECT_TRUE(loads(dir.path())) << "a file only its owner can write";
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  // Owned by another user: that user can rewrite it whatever its mode says.
  ASSERT_EQ(::chown(file.c_str(), 4242, static_cast<gid_t>(-1)), 0);
  EXPECT_THAT(only_failure(dir.path()), HasSubstr("is owned by "));
  ASSERT_EQ(::chown(file.c_str(), 0, 4242), 0);
  fs::permissions(file, fs::perms(0775));
  EXPECT_THAT(only_failure(dir.path()), HasSubstr("is writable by the group "));
  ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);  // root's group: as safe as root
  EXPECT_TRUE(loads(dir.path()));
  // The folder owned by another user: that user can replace the file.
  ASSERT_EQ(::chown(dir.path().c_str(), 4242, 0), 0);
  EXPECT_THAT(only_failure(dir.path()), HasSubstr("insecure: its folder "));
  ASSERT_EQ(::chown(dir.path().c_str(), 0, 0), 0);
}

// The build's own plugins, as the build made them, pass: the checks must not refuse a fresh
// checkout's plugins under the usual umask.
TEST(HostilePlugin, TheBuildsOwnPluginsPass) {
  const AllowInsecure unset(nullptr);
  EXPECT_TRUE(loads(fixture_dir("good")));
  Registry r;
  r.scan({Registry::installed_plugin_dir()});
  for (const auto& f : r.failures()) {
    EXPECT_THAT(f.reason, Not(HasSubstr("insecure"))) << f.file;
    EXPECT_THAT(f.reason, Not(HasSubstr("ELF"))) << f.file;
  }
}

}  // namespace
}  // namespace kvq
