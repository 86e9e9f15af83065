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

#include "kvq/abi/plugin.h"
#include "test_support.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;
using test::fixture;
using test::fixture_dir;
using ::testing::HasSubstr;

// A cache the host accepts (the page is built and checked before any plugin is asked).
BackendOptions options() {
  BackendOptions o;
  o.cache.num_blocks = 3;
  o.cache.num_kv_heads = 1;
  o.cache.head_size = 64;
  return o;
}

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
    options.cache.layout = {"HND", "linear", "linear"};
    writer = backend.make_writer(options);
  }  // Registry and Backend gone; the writer alone holds the plugin now.
  ASSERT_TRUE(writer);
  // 16 tokens x 1 head x (8 data bytes + 1 scale byte) a side, two sides.
  ASSERT_EQ(writer->layout().page_bytes(), 288u);
  std::vector<uint8_t> cache(3 * 288, 0);
  WriteArgs args;  // no tokens: the contract passes, the fixture still fills the cache
  args.key = make_view(nullptr, DType::f32, {0, 1, 16});
  args.value = make_view(nullptr, DType::f32, {0, 1, 16});
  args.slot_mapping = make_view(nullptr, DType::i64, {0});
  args.cache = cache_view(writer->layout(), cache.data());
  test::LogCapture log;
  const Status s = writer->write(args);
  ASSERT_TRUE(s.is_ok()) << s.message();
  // The plugin's log line lands in the host's logger through the C callback it was handed.
  EXPECT_EQ(log.text(), "[info] fixture_good filled 864 bytes\n");
  EXPECT_EQ(cache, std::vector<uint8_t>(3 * 288, 0xA5));
  EXPECT_EQ(writer->layout().format(), "nvfp4");
  EXPECT_EQ(writer->layout().geometry().num_blocks, 3);
  int64_t calls = 0;
  ASSERT_TRUE(writer->take_out_of_range_slots(&calls).is_ok());
  EXPECT_EQ(calls, 1);  // the fixture reports its call count here
  writer.reset();       // the plugin's destroy() runs, and its library is still loaded
}

TEST(PluginRegistry, RuntimeDefaultsToTheHostsWhenThePluginHasNone) {
  const Registry r = scanned({fixture_dir("good")});
  auto runtime = r.select("fixture_good").make_runtime(options());
  ASSERT_TRUE(runtime);
  EXPECT_EQ(runtime.get(), &host_runtime());
}

TEST(PluginRegistry, ReaderFactoryErrorNamesThePluginAndItsMessage) {
  const Registry r = scanned({fixture_dir("good")});
  const std::string msg = error_of([&] { (void)r.select("fixture_good").make_reader(options()); },
                                   ErrorCode::unavailable);
  EXPECT_EQ(msg, "backend 'fixture_good' (" + fixture("good", "libkvq_fixture_good.so").string() +
                     "): cannot create a reader: fixture has no reader");
}

TEST(PluginRegistry, WrongAbiVersionGivesBothNumbers) {
  const fs::path file = fixture("wrong_abi", "libkvq_fixture_wrong_abi.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "plugin ABI 999, host ABI 2 (rebuild the plugin against this kvq)");
}

TEST(PluginRegistry, DescriptorShorterThanTheAbisIsRejected) {
  const fs::path file = fixture("short_struct", "libkvq_fixture_short_struct.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason, "kvq_plugin is 16 bytes, ABI 2 has " +
                                              std::to_string(KVQ_PLUGIN_MIN_STRUCT_SIZE) +
                                              ": a damaged or hand-made descriptor");
}

TEST(PluginRegistry, InitFailureIsReportedWithThePluginsMessage) {
  const fs::path file = fixture("init_fails", "libkvq_fixture_init_fails.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason,
            "plugin 'fixture_init_fails': init failed: fixture init exploded");
}

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
            "no kvq_plugin_entry function: not a kvq plugin (export one with "
            "KVQ_PLUGIN_EXPORT_ENTRY; plugins of kvq 0.1 exported kvq_backend_entry, ABI 1: "
            "rebuild against this kvq)");
}

TEST(PluginRegistry, NullDescriptorIsRejected) {
  const fs::path file = fixture("entry_null", "libkvq_fixture_entry_null.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason, "kvq_plugin_entry returned null");
}

// A plugin built against kvq 0.1 exports the old entry: told to rebuild, never called.
TEST(PluginRegistry, OldAbiEntryIsToldToRebuild) {
  const fs::path file = fixture("old_entry", "libkvq_fixture_old_entry.so");
  const Registry r = scanned({file});
  EXPECT_THAT(only_failure(r, file).reason,
              HasSubstr("plugins of kvq 0.1 exported kvq_backend_entry, ABI 1: rebuild"));
}

// A variable exported under the entry's name lies in data: calling it would crash the host.
TEST(PluginRegistry, EntryThatIsDataIsRejectedWithoutACall) {
  const fs::path file = fixture("entry_data", "libkvq_fixture_entry_data.so");
  const Registry r = scanned({file});
  EXPECT_EQ(only_failure(r, file).reason, "kvq_plugin_entry is not a function of this library");
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
  EXPECT_EQ(error_of([&] { (void)b.make_writer(options()); }, ErrorCode::invalid_argument),
            "backend 'fixture_factory_fails' (" + file.string() +
                "): cannot create a writer: fixture refuses head_size 0");
  // Claiming success without an object is a plugin bug the host catches.
  EXPECT_EQ(error_of([&] { (void)b.make_reader(options()); }, ErrorCode::internal),
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
                " (plugin ABI 999, host ABI 2 (rebuild the plugin against this kvq)); "
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

}  // namespace
}  // namespace kvq
