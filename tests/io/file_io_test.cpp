// Output files whole or not at all (io/src/file_io.cpp): a write that fails or is cancelled
// leaves the old file as it was and no temporary file; two writers of one file each land whole;
// a temporary a dead run left is never reused, and named; check_writable refuses, before any
// work, the paths such a write would fail on, and touches nothing.
#include "kvq/io/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <semaphore>
#include <sstream>
#include <string>
#include <thread>

#include "kvq/core/logging.h"
#include "kvq/core/status.h"
#include "kvq/io/safetensors.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FileIo : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("kvq_file_io_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    file_ = dir_ / "out.bin";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_, file_;
};

// The process's file size limit lowered for one scope (and SIGXFSZ ignored, so that write(2)
// fails with EFBIG instead of killing the test): a full disk, reproducibly.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &lower) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

TEST_F(FileIo, WritesAndReplacesWhole) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("first")));
  EXPECT_EQ(slurp(file_), "first");
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("second, longer")));
  EXPECT_EQ(slurp(file_), "second, longer");
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

TEST_F(FileIo, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("the old contents")));
  const std::string big(1 << 20, 'x');
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    try {
      write_file_atomically(file_, std::string_view(big));
      FAIL() << "a write past the file size limit succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::io);
      const std::string what = e.what();
      EXPECT_TRUE(what.starts_with(file_.string() + ".tmp.")) << what;
      EXPECT_TRUE(what.ends_with(": cannot write it: File too large")) << what;
    }
  }
  EXPECT_EQ(slurp(file_), "the old contents");
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

TEST_F(FileIo, SaveSafetensorsGoesThroughIt) {
  uint8_t small[4] = {1, 2, 3, 4};
  save_safetensors(file_, {{"a", make_view(small, DType::u8, {4})}});
  const std::string before = slurp(file_);
  std::vector<uint8_t> big(1 << 20, 7);
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    EXPECT_THROW(save_safetensors(file_, {{"a", make_view(big.data(), DType::u8, {1 << 20})}}),
                 Error);
  }
  EXPECT_EQ(slurp(file_), before);
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

TEST_F(FileIo, CancelledLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  EXPECT_FALSE(write_file_atomically(file_, std::string_view("never"), [] { return true; }));
  EXPECT_EQ(slurp(file_), "kept");
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

// Temporaries a dead run left (FILE.tmp.XXXXXX, and FILE.tmp as earlier versions named theirs)
// are never reused: a write makes its own, leaves theirs as they are and names them in a
// warning with their size. One that a running writer holds (locked) is not stale.
TEST_F(FileIo, StaleTemporariesAreNeverReusedAndNamed) {
  const fs::path legacy = dir_ / "out.bin.tmp", killed = dir_ / "out.bin.tmp.AbC123",
                 running = dir_ / "out.bin.tmp.zzzzzz";
  std::ofstream(legacy) << "stale bytes from a run that died";
  std::ofstream(killed) << "more stale bytes";
  std::ofstream(running) << "a running writer's bytes";
  const int held = ::open(running.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  EXPECT_EQ(stale_temporary_files_of(file_), (std::vector<fs::path>{legacy, killed}));
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  logger().sinks().push_back(sink);
  const bool written = write_file_atomically(file_, std::string_view("ab"));
  logger().sinks().pop_back();
  ::close(held);
  ASSERT_TRUE(written);
  EXPECT_EQ(slurp(file_), "ab");
  EXPECT_EQ(slurp(legacy), "stale bytes from a run that died");
  EXPECT_EQ(slurp(killed), "more stale bytes");
  EXPECT_EQ(slurp(running), "a running writer's bytes");
  EXPECT_EQ(temporary_files_of(file_), (std::vector<fs::path>{legacy, killed, running}));
  const std::string said = log.str();
  EXPECT_NE(said.find(legacy.string() + ": a temporary file (32 bytes) left by a write of " +
                      file_.string() + " that did not finish; kvq never reuses it"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find(killed.string() + ": a temporary file (16 bytes)"), std::string::npos)
      << said;
  EXPECT_EQ(said.find(running.string()), std::string::npos) << said;
}

// The race of two `kvq write` runs to one output, step by step: writer A has every byte on disk
// and is about to rename; writer B starts, makes its temporary and stops before its first byte;
// A renames. When both used FILE.tmp, B had just truncated A's file there, and A renamed that
// empty file over FILE and reported success. Each writer now renames its own temporary: FILE
// holds A's whole bytes once A is done, and B's whole bytes once B is.
TEST_F(FileIo, TwoWritersOfOneFileEachLandWhole) {
  using namespace std::chrono_literals;
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("the old contents")));
  const std::string a(100000, 'a'), b(70000, 'b');
  std::binary_semaphore a_at_rename{0}, b_started{0}, a_done{0};
  int a_calls = 0, b_calls = 0;
  bool a_ok = false, b_ok = false, timed_out = false;
  // A is asked before its temporary, before its one chunk, then before the rename (call 3).
  std::thread writer_a([&] {
    a_ok = write_file_atomically(file_, std::string_view(a), [&] {
      if (++a_calls == 3) {
        a_at_rename.release();
        timed_out = timed_out || !b_started.try_acquire_for(60s);
      }
      return false;
    });
    a_done.release();
  });
  ASSERT_TRUE(a_at_rename.try_acquire_for(60s));
  std::thread writer_b([&] {
    b_ok = write_file_atomically(file_, std::string_view(b), [&] {
      if (++b_calls == 2) {  // its temporary exists: before its first byte
        EXPECT_EQ(temporary_files_of(file_).size(), 2u);
        b_started.release();
        timed_out = timed_out || !a_done.try_acquire_for(60s);
        EXPECT_EQ(slurp(file_), a) << "A's rename must put A's whole bytes at FILE";
      }
      return false;
    });
  });
  writer_a.join();
  writer_b.join();
  EXPECT_FALSE(timed_out);
  EXPECT_TRUE(a_ok);
  EXPECT_TRUE(b_ok);
  EXPECT_EQ(slurp(file_), b);
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

// `cancelled` is asked before the temporary is created and before each chunk handed to write(2).
// Here it says yes once the first chunk is in the temporary: the write stops between chunks, the
// temporary is removed and FILE is kept.
TEST_F(FileIo, CancelledBetweenChunksLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  const std::string big(2 * kFileWriteChunkBytes + 1, 'x');  // three chunks
  std::uintmax_t written_when_cancelled = 0;
  const auto cancel_after_first_chunk = [&] {
    const std::vector<fs::path> temporaries = temporary_files_of(file_);
    if (temporaries.size() != 1) return false;
    std::error_code ec;
    const std::uintmax_t written = fs::file_size(temporaries.front(), ec);
    if (ec || written == 0) return false;
    written_when_cancelled = written;
    return true;
  };
  EXPECT_FALSE(write_file_atomically(file_, std::string_view(big), cancel_after_first_chunk));
  EXPECT_EQ(written_when_cancelled, kFileWriteChunkBytes);
  const std::string now = slurp(file_);  // not EXPECT_EQ: a failure would print 128 MiB
  EXPECT_TRUE(now == "kept") << "FILE holds " << now.size() << " bytes";
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

// Cancelled at the last moment, every byte on disk and the rename not yet done: FILE is kept.
TEST_F(FileIo, CancelledBeforeTheRenameLeavesTheOldFile) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  int calls = 0;
  EXPECT_FALSE(
      write_file_atomically(file_, std::string_view("never"), [&] { return ++calls == 3; }));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(slurp(file_), "kept");
  EXPECT_TRUE(temporary_files_of(file_).empty());
}

// A symbolic link planted where a temporary might go (FILE.tmp, FILE.tmp.XXXXXX) is never
// followed nor reused: the file it names keeps its bytes, and the link stays.
TEST_F(FileIo, ALinkNamedLikeATemporaryIsNeverFollowed) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  const fs::path victim = dir_ / "victim.txt";
  std::ofstream(victim) << "not yours";
  fs::create_symlink(victim, dir_ / "out.bin.tmp");
  fs::create_symlink(victim, dir_ / "out.bin.tmp.aaaaaa");
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("new")));
  EXPECT_EQ(slurp(victim), "not yours");
  EXPECT_EQ(slurp(file_), "new");
  EXPECT_TRUE(fs::is_symlink(dir_ / "out.bin.tmp"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "out.bin.tmp.aaaaaa"));
  EXPECT_NO_THROW(check_writable(file_, "--out"));
}

TEST_F(FileIo, CheckWritableRefusesWhatAWriteWouldFailOn) {
  const auto refused = [](const fs::path& p) -> std::string {
    try {
      check_writable(p, "--out");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refused(""), "--out: expected a file path, found ''");
  EXPECT_EQ(refused(dir_), "--out " + dir_.string() + ": is a folder: expected a file path");
  EXPECT_EQ(refused(dir_ / "no" / "x.json"), "--out " + (dir_ / "no" / "x.json").string() +
                                                 ": no such folder " + (dir_ / "no").string());
  // A writable path passes and nothing is created or changed.
  EXPECT_EQ(refused(file_), "");
  EXPECT_FALSE(fs::exists(file_));
  EXPECT_TRUE(temporary_files_of(file_).empty());
  std::ofstream(file_) << "precious";
  EXPECT_EQ(refused(file_), "");
  EXPECT_EQ(slurp(file_), "precious");
}

// An existing output that is not a regular file (a FIFO here; a device such as /dev/null is the
// same case) is refused before any work, and by the write itself before FILE.tmp exists: the
// rename would replace it with a regular file. Through a symbolic link too.
TEST_F(FileIo, AnOutputThatIsNotARegularFileIsRefusedNotReplaced) {
  ASSERT_EQ(::mkfifo(file_.c_str(), 0644), 0) << std::strerror(errno);
  const fs::path link = dir_ / "link.bin";
  fs::create_symlink(file_, link);
  for (const fs::path& out : {file_, link}) {
    const std::string why = ": is a FIFO: expected a regular file or a new path";
    try {
      check_writable(out, "--out");
      ADD_FAILURE() << "check_writable passed " << out;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()), "--out " + out.string() + why);
    }
    try {
      write_file_atomically(out, std::string_view("bytes"));
      ADD_FAILURE() << "wrote over " << out;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()), out.string() + why);
    }
    EXPECT_TRUE(temporary_files_of(out).empty());
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(file_)));
  EXPECT_TRUE(fs::is_symlink(link));
}

// A symbolic link at the output that leads to a regular file (or to nothing) is itself replaced:
// the output becomes a regular file, and the file the link named keeps its bytes.
TEST_F(FileIo, ALinkAtTheOutputIsReplacedNotWrittenThrough) {
  const fs::path target = dir_ / "target.txt";
  std::ofstream(target) << "the link's target";
  fs::create_symlink(target, file_);
  EXPECT_NO_THROW(check_writable(file_, "--out"));
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("new")));
  EXPECT_FALSE(fs::is_symlink(file_));
  EXPECT_EQ(slurp(file_), "new");
  EXPECT_EQ(slurp(target), "the link's target");
  const fs::path dangling = dir_ / "dangling.bin";
  fs::create_symlink(dir_ / "nowhere", dangling);
  EXPECT_NO_THROW(check_writable(dangling, "--out"));
  ASSERT_TRUE(write_file_atomically(dangling, std::string_view("new")));
  EXPECT_FALSE(fs::is_symlink(dangling));
  EXPECT_EQ(slurp(dangling), "new");
  EXPECT_FALSE(fs::exists(dir_ / "nowhere"));
}

// An output may not be an input under any name.
TEST_F(FileIo, CheckDistinctRefusesAnInputTheOutputWouldReplace) {
  const auto refused = [](const fs::path& out, const fs::path& in) -> std::string {
    try {
      check_distinct(out, "--output", in, "--input");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      return e.what();
    }
    return "";
  };
  std::ofstream(file_) << "input";
  EXPECT_EQ(refused(file_, file_),
            "--output " + file_.string() + ": is the --input file: expected a different file");
  fs::create_hard_link(file_, dir_ / "link.bin");
  EXPECT_NE(refused(dir_ / "link.bin", file_), "");
  // The temporary a write makes is a new file: an input named like one is no concern of it.
  const fs::path tmp_input = dir_ / "out.bin.tmp";
  std::ofstream(tmp_input) << "an input named like the temporary";
  EXPECT_EQ(refused(file_, tmp_input), "");
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("output")));
  EXPECT_EQ(refused(dir_ / "other.bin", file_), "");
  EXPECT_EQ(refused(file_, ""), "");  // an optional input not given
  EXPECT_EQ(slurp(tmp_input), "an input named like the temporary");
}

}  // namespace
}  // namespace kvq
