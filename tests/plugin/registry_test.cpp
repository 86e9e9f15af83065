// The registry against real fixture plugins (tests/plugin/fixtures): each case breaks one rule of
// the plugin ABI and must come back as a failure naming the file and the reason.
#include "kvq/core/registry.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "test_support.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;
using test::fixture;
using test::fixture_dir;
using ::testing::HasSubstr;

// The one failure recorded for `path` (fails the test when there is not exactly one).
PluginFailure only_failure(const Registry& r, const fs::path& path) {
  EXPECT_TRUE(r.plugins().empty()) << "first plugin: " << r.plugins().front().name;
  EXPECT_EQ(r.failures().size(), 1u);
  if (r.failures().empty()) return {};
  EXPECT_EQ(r.failures().front().file, path);
  return r.failures().front();
}

Registry scanned(const std::vector<fs::path>& paths) {
  Registry r;
  r.scan(paths);
  return r;
}

// Expects `fn` to throw kvq::Error with `code`, and returns its message.
template <class Fn>
std::string error_of(Fn&& fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kvq::Error thrown";
  return {};
}

TEST(PluginRegistry, GoodFixtureIsListedWithItsDescriptor) {
  const Registry r = scanned({fixture_dir("good")});
  ASSERT_TRUE(r.failures().empty()) << r.failures().front().reason;
  ASSERT_EQ(r.plugins().size(), 1u);
  const PluginInfo& p = r.plugins().front();
  EXPECT_EQ(p.name, "fixture_good");
  EXPECT_EQ(p.version, "9.8.7");
  EXPECT_EQ(p.formats, "fixture");
  EXPECT_EQ(p.layouts, "one region");
  EXPECT_TRUE(p.available);
  EXPECT_EQ(p.score, 5);
  EXPECT_EQ(p.reason, "fixture ready");
  EXPECT_EQ(p.file, fixture("good", "libkvq_fixture_good.so"));
}

TEST(PluginRegistry, WriterIsMadeAndCalledAndOutlivesTheRegistry) {
  std::shared_ptr<KVCacheWriter> writer;
  {
    Registry r;
    r.scan({fixture_dir("good")});
    Backend backend = r.select("fixture_good");
    BackendOptions options;
    options.cache.num_blocks = 3;
    options.cache.num_kv_heads = 1;
    options.cache.head_size = 16;
    writer = backend.make_writer(options);
  }  // Registry and Backend gone; the writer alone holds the plugin now.
  ASSERT_TRUE(writer);
  std::vector<uint8_t> cache(3 * 16, 0);
  WriteArgs args;
  args.cache = make_view(cache.data(), DType::u8, {3, 16});
  test::LogCapture log;
  const Status s = writer->write(args);
  ASSERT_TRUE(s.is_ok()) << s.message();
  // The plugin's log line lands in the host's logger, not a copy of spdlog's registry of its own.
  EXPECT_EQ(log.text(), "[info] fixture_good filled 48 bytes\n");
  EXPECT_EQ(cache, std::vector<uint8_t>(3 * 16, 0xA5));
  EXPECT_EQ(writer->layout().format(), "fixture");
  EXPECT_EQ(writer->layout().geometry().num_blocks, 3);
  int64_t calls = 0;
  ASSERT_TRUE(writer->take_out_of_range_slots(&calls).is_ok());
  EXPECT_EQ(calls, 1);  // the fixture reports its call count here
  writer.reset();       // the virtual destructor runs in the plugin, which is still loaded
}

TEST(PluginRegistry, RuntimeDefaultsToTheHostsWhenThePluginHasNone) {
  const Registry r = scanned({fixture_dir("good")});
  auto runtime = r.select("fixture_good").make_runtime({});
  ASSERT_TRUE(runtime);
  EXPECT_EQ(runtime.get(), &host_runtime());
}

TEST(PluginRegistry, ReaderFactoryErrorNamesThePluginAndItsMessage) {
  const Registry r = scanned({fixture_dir("good")});
  const std::string msg =
      error_of([&] { (void)r.select("fixture_good").make_reader({}); }, ErrorCode::unavailable);
  EXPECT_EQ(msg, "backend 'fixture_good' (" + fixture("good", "libkvq_fixture_good.so").string() +
                     "): cannot create a reader: fixture has no reader");
}

TEST(PluginRegistry, WrongAbiVersionGivesBothNumbers) {
  const fs::path file = fixture("wrong_abi", "libkvq_fixture_wrong_abi.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "plugin ABI 999, host ABI 1 (rebuild the plugin against this kvq)");
}

TEST(PluginRegistry, FingerprintMismatchShowsBothBuilds) {
  const fs::path file = fixture("fingerprint", "libkvq_fixture_fingerprint.so");
  const Registry r = scanned({fixture_dir("fingerprint")});
  const std::string reason = only_failure(r, file).reason;
  const BuildFingerprint host = host_build_fingerprint();
  EXPECT_EQ(reason, std::string("build fingerprint mismatch: plugin built with gcc 1 / ") +
                        host.cxx_abi + " / kvq " + host.kvq_version + ", host with " +
                        host.compiler + " / " + host.cxx_abi + " / kvq " + host.kvq_version);
}

// Each part of the fingerprint is checked on its own: a plugin that agrees on compiler and kvq
// version but was built against another C++ library ABI (std::string's layout) is refused too.
TEST(PluginRegistry, CxxAbiMismatchAloneIsAFingerprintMismatch) {
  const fs::path file = fixture("cxx_abi", "libkvq_fixture_cxx_abi.so");
  const Registry r = scanned({file});
  const BuildFingerprint host = host_build_fingerprint();
  EXPECT_EQ(only_failure(r, file).reason,
            std::string("build fingerprint mismatch: plugin built with ") + host.compiler +
                " / other-cxx-abi / kvq " + host.kvq_version + ", host with " + host.compiler +
                " / " + host.cxx_abi + " / kvq " + host.kvq_version);
}

// A plugin must answer to a name: with "" it could never be selected and would sit unnamed in
// `kvq backends` and in auto's choice.
TEST(PluginRegistry, EmptyNameIsRejected) {
  const fs::path file = fixture("empty_name", "libkvq_fixture_empty_name.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason, "descriptor has no name");
}

// A null create_reader would be called by Backend::make_reader (a crash, not an error): it is
// refused at load, by name.
TEST(PluginRegistry, DescriptorWithoutReaderFactoryIsRejected) {
  const fs::path file = fixture("no_reader", "libkvq_fixture_no_reader.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "plugin 'fixture_no_reader': descriptor lacks create_reader");
}

TEST(PluginRegistry, PlainSharedLibraryHasNoEntry) {
  const fs::path file = fixture("no_entry", "libkvq_no_entry.so");
  const Registry r = scanned({fixture_dir("no_entry")});
  EXPECT_EQ(only_failure(r, file).reason,
            "no kvq_backend_entry symbol: not a kvq plugin (export one with KVQ_DEFINE_BACKEND)");
}

TEST(PluginRegistry, NullDescriptorIsRejected) {
  const fs::path file = fixture("entry_null", "libkvq_fixture_entry_null.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason, "kvq_backend_entry returned null");
}

// Two ways to get the export wrong that would otherwise crash the host: a plain function named
// kvq_backend_entry (its code read as a pointer) and an alias of a variable (called as code).
TEST(PluginRegistry, EntryThatIsNotAnAliasIsRejected) {
  const fs::path file = fixture("plain_entry", "libkvq_fixture_plain_entry.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "kvq_backend_entry is not a Boost.DLL alias into this library (export it with "
            "KVQ_DEFINE_BACKEND)");
}

// Whether the page holding `address` lies wholly inside executable segments of the object that
// holds it, with nothing else there (program headers, symbol tables) that a loader reads.
bool page_holds_only_code(const void* address, uintptr_t page_size) {
  struct Query {
    uintptr_t page;
    uintptr_t size;
    bool code = false;   // an executable segment covers the page
    bool other = false;  // something else shares it
  } query{reinterpret_cast<uintptr_t>(address) & ~(page_size - 1), page_size};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t begin = info->dlpi_addr + ph.p_vaddr, end = begin + ph.p_memsz;
          if (end <= q->page || begin >= q->page + q->size) continue;
          if ((ph.p_flags & PF_X) && begin <= q->page && end >= q->page + q->size) {
            q->code = true;
          } else {
            q->other = true;
          }
        }
        return 0;
      },
      &query);
  return query.code && !query.other;
}

// The loader tells a plain function exported as kvq_backend_entry from an alias by the symbol
// (its type, size and segment), never by reading the function's code as a pointer: that read is
// undefined behaviour (UBSan: reference binding to misaligned address). Here the function's
// page is made unreadable first, so a loader that reads it dies of SIGSEGV. In a child process,
// which an alarm ends should it hang.
TEST(PluginRegistryDeathTest, EntryThatIsNotAnAliasIsRefusedWithoutReadingItsCode) {
  const fs::path file = fixture("plain_entry", "libkvq_fixture_plain_entry.so");
  void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  void* code = dlsym(handle, "kvq_backend_entry");
  ASSERT_NE(code, nullptr) << dlerror();
  const auto page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (!page_holds_only_code(code, page_size)) {
    GTEST_SKIP() << file << " was linked without a code segment of its own (-z separate-code): "
                 << "its kvq_backend_entry shares a page with data the loader must read";
  }
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(code) & ~(page_size - 1));
  EXPECT_EXIT(
      {
        alarm(20);
        if (mprotect(page, page_size, PROT_NONE) != 0) {
          std::fprintf(stderr, "mprotect: %s\n", std::strerror(errno));
          std::_Exit(2);
        }
        Registry r;
        r.scan({file});
        const std::string want =
            "kvq_backend_entry is not a Boost.DLL alias into this library (export it with "
            "KVQ_DEFINE_BACKEND)";
        if (!r.plugins().empty() || r.failures().size() != 1 || r.failures()[0].reason != want) {
          std::fprintf(stderr, "plugins: %zu, failures: %zu, first: %s\n", r.plugins().size(),
                       r.failures().size(),
                       r.failures().empty() ? "none" : r.failures()[0].reason.c_str());
          std::_Exit(1);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(PluginRegistry, EntryAliasOfDataIsRejectedWithoutACall) {
  const fs::path file = fixture("entry_data", "libkvq_fixture_entry_data.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "kvq_backend_entry points at data, not at a function (KVQ_DEFINE_BACKEND takes the "
            "function that returns the descriptor)");
}

TEST(PluginRegistry, TextFileIsNotASharedLibrary) {
  const fs::path file = fixture("garbage", "libkvq_garbage.so");
  const Registry r = scanned({fixture_dir("garbage")});
  const std::string reason = only_failure(r, file).reason;
  EXPECT_THAT(reason, HasSubstr("not a shared library (dlopen: "));
  EXPECT_THAT(reason, HasSubstr("libkvq_garbage.so"));  // dlerror names the file ...
  EXPECT_THAT(reason, HasSubstr("ELF header"));         // ... and what is wrong with it
}

TEST(PluginRegistry, MissingPathIsReportedNotThrown) {
  const fs::path missing = fixture_dir("good") / "libkvq_does_not_exist.so";
  const Registry r = scanned({missing, fixture_dir("no_such_case")});
  ASSERT_EQ(r.failures().size(), 2u);
  EXPECT_EQ(r.failures()[0].file, missing);
  EXPECT_EQ(r.failures()[0].reason, "file not found");
  EXPECT_EQ(r.failures()[1].file, fixture_dir("no_such_case"));
  EXPECT_EQ(r.failures()[1].reason, "file not found");
}

TEST(PluginRegistry, ProbeFailureIsALoadFailure) {
  const fs::path file = fixture("probe_fails", "libkvq_fixture_probe_fails.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "plugin 'fixture_probe_fails': probe failed: runtime error: fixture probe exploded");
}

TEST(PluginRegistry, UnavailablePluginIsListedAndRefusedByName) {
  const fs::path file = fixture("unavailable", "libkvq_fixture_unavailable.so");
  const Registry r = scanned({file});
  ASSERT_EQ(r.plugins().size(), 1u);
  EXPECT_FALSE(r.plugins().front().available);
  EXPECT_EQ(r.plugins().front().reason, "no fixture device");
  const std::string msg =
      error_of([&] { (void)r.select("fixture_unavailable"); }, ErrorCode::unavailable);
  EXPECT_EQ(msg, "backend 'fixture_unavailable' (" + file.string() +
                     ") is unavailable: no fixture device");
}

TEST(PluginRegistry, FactoryFailureSurfacesAsErrorWithPluginName) {
  const fs::path file = fixture("factory_fails", "libkvq_fixture_factory_fails.so");
  const Registry r = scanned({file});
  const Backend b = r.select("fixture_factory_fails");
  EXPECT_EQ(error_of([&] { (void)b.make_writer({}); }, ErrorCode::invalid_argument),
            "backend 'fixture_factory_fails' (" + file.string() +
                "): cannot create a writer: fixture refuses head_size 0");
  // Claiming success without an object is a plugin bug the host catches.
  EXPECT_EQ(error_of([&] { (void)b.make_reader({}); }, ErrorCode::internal),
            "backend 'fixture_factory_fails' (" + file.string() +
                "): create_reader reported success but returned no reader");
}

TEST(PluginRegistry, DuplicateNamesNameBothFilesAndSelectRefuses) {
  const fs::path a = fixture("duplicate", "libkvq_twin_a.so");
  const fs::path b = fixture("duplicate", "libkvq_twin_b.so");
  const Registry r = scanned({fixture_dir("duplicate"), fixture_dir("good")});
  ASSERT_EQ(r.failures().size(), 1u);
  EXPECT_EQ(r.failures()[0].file, b);
  EXPECT_EQ(r.failures()[0].reason, "plugin name 'fixture_twin' is also used by " + a.string() +
                                        "; neither is used (plugin names must be unique)");
  ASSERT_EQ(r.plugins().size(), 1u);  // only fixture_good
  EXPECT_EQ(r.plugins()[0].name, "fixture_good");
  EXPECT_EQ(error_of([&] { (void)r.select("fixture_twin"); }, ErrorCode::invalid_argument),
            "backend 'fixture_twin' is ambiguous: it is provided by both " + a.string() + " and " +
                b.string() + "; remove all but one from the plugin search path");
}

// A name once found twice stays ambiguous: a third file with it joins the conflict (it is not
// loaded as if the name were free again) and select names all three files.
TEST(PluginRegistry, ThirdFileWithADuplicatedNameIsAlsoRefused) {
  const fs::path a = fixture("duplicate", "libkvq_twin_a.so");
  const fs::path b = fixture("duplicate", "libkvq_twin_b.so");
  const fs::path c = fixture("duplicate_third", "libkvq_twin_c.so");
  const Registry r = scanned({fixture_dir("duplicate"), fixture_dir("duplicate_third")});
  EXPECT_TRUE(r.plugins().empty()) << "first plugin: " << r.plugins().front().file;
  ASSERT_EQ(r.failures().size(), 2u);
  const std::string why = "plugin name 'fixture_twin' is also used by " + a.string() +
                          "; neither is used (plugin names must be unique)";
  EXPECT_EQ(r.failures()[0].file, b);
  EXPECT_EQ(r.failures()[0].reason, why);
  EXPECT_EQ(r.failures()[1].file, c);
  EXPECT_EQ(r.failures()[1].reason, why);
  EXPECT_EQ(error_of([&] { (void)r.select("fixture_twin"); }, ErrorCode::invalid_argument),
            "backend 'fixture_twin' is ambiguous: it is provided by both " + a.string() + ", " +
                b.string() + " and " + c.string() +
                "; remove all but one from the plugin search path");
}

// Only libkvq_<name>.so with a non-empty <name> is a plugin file: a bare "libkvq_.so" in a plugin
// folder is ignored like any other file, not loaded and reported.
TEST(PluginRegistry, FileNamedJustLibkvqSoIsNotScanned) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvq-registry-bare-" + std::to_string(getpid()));
  fs::create_directories(dir);
  // Not a library: were it scanned, it would come back as a "not a shared library" failure.
  std::ofstream(dir / "libkvq_.so") << "a file with the plugin prefix and suffix and no name\n";
  // A real plugin next to it shows the folder was scanned.
  fs::create_symlink(fixture("good", "libkvq_fixture_good.so"), dir / "libkvq_x.so");
  const Registry r = scanned({dir});
  fs::remove_all(dir);
  EXPECT_TRUE(r.failures().empty())
      << r.failures().front().file << ": " << r.failures().front().reason;
  ASSERT_EQ(r.plugins().size(), 1u);
  EXPECT_EQ(r.plugins()[0].name, "fixture_good");
}

// A FIFO named like a plugin, in a scanned folder or named itself, is reported and never opened:
// dlopen of a FIFO waits for a writer, for ever. In a child process, which an alarm ends should
// the scan hang.
TEST(PluginRegistryDeathTest, FifoNamedLikeAPluginIsReportedNotOpened) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvq-registry-fifo-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path fifo = dir / "libkvq_x.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  // Through a link too: what the link leads to counts.
  fs::create_symlink(fifo, dir / "libkvq_link.so");
  EXPECT_EXIT(
      {
        alarm(20);
        const std::string want = "not a regular file (a FIFO): expected a shared library";
        int status = 0;
        const auto expect = [&](const std::vector<fs::path>& scan, const fs::path& file) {
          Registry r;
          r.scan(scan);
          if (r.plugins().empty() && r.failures().size() == 1 && r.failures()[0].file == file &&
              r.failures()[0].reason == want) {
            return;
          }
          std::fprintf(stderr, "scan of %s: %zu plugins, %zu failures, first: %s: %s\n",
                       scan.front().c_str(), r.plugins().size(), r.failures().size(),
                       r.failures().empty() ? "none" : r.failures()[0].file.c_str(),
                       r.failures().empty() ? "" : r.failures()[0].reason.c_str());
          status = 1;
        };
        expect({fifo}, fifo);
        expect({dir / "libkvq_link.so"}, dir / "libkvq_link.so");
        // The folder: the link and the FIFO are one file, reported once, under the first name.
        expect({dir}, dir / "libkvq_link.so");
        std::_Exit(status);
      },
      ::testing::ExitedWithCode(0), "");
  fs::remove_all(dir);
}

TEST(PluginRegistry, SameFileThroughAnotherPathLoadsOnce) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvq-registry-link-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::create_symlink(fixture("good", "libkvq_fixture_good.so"), dir / "libkvq_link.so");
  Registry r;
  r.scan({fixture_dir("good"), dir, fixture_dir("good") / ".." / "good"});
  r.scan({fixture_dir("good")});
  fs::remove_all(dir);
  EXPECT_TRUE(r.failures().empty()) << r.failures().front().reason;
  ASSERT_EQ(r.plugins().size(), 1u);
  EXPECT_EQ(r.plugins()[0].file, fixture("good", "libkvq_fixture_good.so"));
}

TEST(PluginRegistry, UnknownNameListsWhatWasFoundAndWhatFailed) {
  const Registry r =
      scanned({fixture_dir("good"), fixture_dir("unavailable"), fixture_dir("wrong_abi")});
  const std::string msg = error_of([&] { (void)r.select("nope"); }, ErrorCode::not_found);
  EXPECT_EQ(msg,
            "no backend named 'nope' (found: fixture_good, fixture_unavailable "
            "(unavailable: no fixture device); not loaded: " +
                fixture("wrong_abi", "libkvq_fixture_wrong_abi.so").string() +
                " (plugin ABI 999, host ABI 1 (rebuild the plugin against this kvq)); "
                "searched: " +
                fixture_dir("good").string() + ", " + fixture_dir("unavailable").string() +
                " and " + fixture_dir("wrong_abi").string() + ")");
}

TEST(PluginRegistry, AutoPicksHighestAvailableScoreAndSaysWhyOthersWereSkipped) {
  // fixture_unavailable scores 1000 but cannot run; fixture_good (5) is chosen.
  const Registry r = scanned({fixture_dir("unavailable"), fixture_dir("good")});
  test::LogCapture log;
  const Backend b = r.select("auto");
  EXPECT_EQ(b.info().name, "fixture_good");
  EXPECT_EQ(log.text(),
            "[info] backend auto: fixture_unavailable unavailable: no fixture device; using "
            "fixture_good 9.8.7 (score 5, fixture ready) from " +
                fixture("good", "libkvq_fixture_good.so").string() + "\n");
}

// docs/plugins.md: search order decides who wins a tie in auto's score, the first found. Within
// a folder files are loaded in name order, so libkvq_tie_a.so is first ...
TEST(PluginRegistry, AutoTieGoesToTheFirstFoundInAFolder) {
  const Registry r = scanned({fixture_dir("tie")});
  ASSERT_EQ(r.plugins().size(), 2u);
  EXPECT_EQ(r.select("auto").info().name, "fixture_tie_a");
}

// ... and across the search path the earlier entry is first, whatever the names.
TEST(PluginRegistry, AutoTieGoesToTheFirstFoundInTheSearchPath) {
  const Registry r =
      scanned({fixture("tie", "libkvq_tie_b.so"), fixture("tie", "libkvq_tie_a.so")});
  ASSERT_EQ(r.plugins().size(), 2u);
  EXPECT_EQ(r.select("auto").info().name, "fixture_tie_b");
}

TEST(PluginRegistry, AutoWithNothingAvailableIsUnavailable) {
  const Registry r = scanned({fixture_dir("unavailable")});
  EXPECT_THAT(error_of([&] { (void)r.select("auto"); }, ErrorCode::unavailable),
              HasSubstr("backend auto: no available backend (found: fixture_unavailable "
                        "(unavailable: no fixture device)"));
}

TEST(PluginRegistry, SearchPathOrderIsConfigThenEnvironmentThenInstalled) {
  ASSERT_EQ(setenv("KVQ_PLUGIN_PATH", "/env/one::relative/two:", 1), 0);
  const auto path = Registry::search_path({"plugins", "/abs/plugins"}, "/etc/kvq");
  unsetenv("KVQ_PLUGIN_PATH");
  std::vector<fs::path> expected{"/etc/kvq/plugins", "/abs/plugins", "/env/one", "relative/two"};
  // This test links <build>/lib/libkvq_core.so, so the installed folder is
  // <build>/lib/kvq/plugins (searched only when it exists, i.e. when some backend has been built).
  const char* build = std::getenv("KVQ_BUILD_DIR");
  ASSERT_NE(build, nullptr);
  const fs::path installed = fs::path(build) / "lib" / "kvq" / "plugins";
  EXPECT_EQ(Registry::installed_plugin_dir(), installed.lexically_normal());
  if (fs::is_directory(installed)) expected.push_back(installed.lexically_normal());
  EXPECT_EQ(path, expected);
}

TEST(PluginRegistry, HostFingerprintIsThisBuilds) {
  const BuildFingerprint f = host_build_fingerprint();
  EXPECT_STREQ(f.kvq_version, KVQ_VERSION_STRING);
  EXPECT_STREQ(f.compiler, KVQ_COMPILER_ID);
  EXPECT_STREQ(f.cxx_abi, KVQ_CXX_ABI_ID);
}

}  // namespace
}  // namespace kvq
