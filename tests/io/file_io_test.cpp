// Output files whole or not at all (core/src/file_io.cpp): a write that fails or is cancelled
// leaves the old file as it was and no FILE.tmp; check_writable refuses, before any work, the
// paths such a write would fail on, and touches nothing.
#include "kvq/core/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kvq/core/safetensors.h"
#include "kvq/core/status.h"

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
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
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
      EXPECT_EQ(std::string(e.what()),
                temporary_path_for(file_).string() + ": cannot write it: File too large");
    }
  }
  EXPECT_EQ(slurp(file_), "the old contents");
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
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
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
}

TEST_F(FileIo, CancelledLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  EXPECT_FALSE(write_file_atomically(file_, std::string_view("never"), [] { return true; }));
  EXPECT_EQ(slurp(file_), "kept");
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
}

// A FILE.tmp left longer by an earlier crash is truncated, not overwritten in place: its tail
// must not end up in FILE.
TEST_F(FileIo, StaleLongerTemporaryIsTruncated) {
  std::ofstream(temporary_path_for(file_)) << "stale bytes from a run that died";
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("ab")));
  EXPECT_EQ(slurp(file_), "ab");
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
}

// `cancelled` is asked before FILE.tmp is created and before each chunk handed to write(2).
// Here it says yes once the first chunk is in FILE.tmp: the write stops between chunks, FILE.tmp
// is removed and FILE is kept.
TEST_F(FileIo, CancelledBetweenChunksLeavesTheOldFileAndNoTemporary) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  const std::string big(2 * kFileWriteChunkBytes + 1, 'x');  // three chunks
  std::uintmax_t written_when_cancelled = 0;
  const auto cancel_after_first_chunk = [&] {
    std::error_code ec;
    const std::uintmax_t written = fs::file_size(temporary_path_for(file_), ec);
    if (ec || written == 0) return false;
    written_when_cancelled = written;
    return true;
  };
  EXPECT_FALSE(write_file_atomically(file_, std::string_view(big), cancel_after_first_chunk));
  EXPECT_EQ(written_when_cancelled, kFileWriteChunkBytes);
  const std::string now = slurp(file_);  // not EXPECT_EQ: a failure would print 128 MiB
  EXPECT_TRUE(now == "kept") << "FILE holds " << now.size() << " bytes";
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
}

// A symbolic link at FILE.tmp is refused, not followed: the file it names and FILE keep their
// bytes, and the link stays.
TEST_F(FileIo, ALinkAtTheTemporaryIsRefusedNotFollowed) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  const fs::path victim = dir_ / "victim.txt";
  std::ofstream(victim) << "not yours";
  fs::create_symlink(victim, temporary_path_for(file_));
  try {
    write_file_atomically(file_, std::string_view("new"));
    FAIL() << "wrote through a symbolic link";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_EQ(std::string(e.what()),
              temporary_path_for(file_).string() +
                  ": cannot create it: it is a symbolic link: expected a plain file or none");
  }
  EXPECT_EQ(slurp(victim), "not yours");
  EXPECT_EQ(slurp(file_), "kept");
  EXPECT_TRUE(fs::is_symlink(temporary_path_for(file_)));
  EXPECT_THROW(check_writable(file_, "--out"), Error);
}

// A second writer of the same FILE (here: FILE.tmp locked as a running write holds it) is refused
// and leaves FILE and the other's FILE.tmp alone.
TEST_F(FileIo, ASecondWriterOfTheSameFileIsRefused) {
  ASSERT_TRUE(write_file_atomically(file_, std::string_view("kept")));
  std::ofstream(temporary_path_for(file_)) << "the other writer's bytes";
  const int fd = ::open(temporary_path_for(file_).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  try {
    write_file_atomically(file_, std::string_view("new"));
    FAIL() << "two writers of one file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), file_.string() + ": another process is writing it (it holds " +
                                         temporary_path_for(file_).string() + ")");
  }
  ::close(fd);
  EXPECT_EQ(slurp(file_), "kept");
  EXPECT_EQ(slurp(temporary_path_for(file_)), "the other writer's bytes");
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
  EXPECT_FALSE(fs::exists(temporary_path_for(file_)));
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
    EXPECT_FALSE(fs::exists(temporary_path_for(out)));
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

// An output may not be an input under any name, nor write through an input: OUT.tmp is truncated
// before the bytes go there, so an input named OUT.tmp would be lost.
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
  const fs::path tmp_input = temporary_path_for(file_);
  std::ofstream(tmp_input) << "an input named like the temporary";
  EXPECT_EQ(refused(file_, tmp_input),
            "--output " + file_.string() + ": writes through " + tmp_input.string() +
                ", which is the --input file: expected an output whose FILE.tmp is not an input");
  EXPECT_EQ(refused(dir_ / "other.bin", file_), "");
  EXPECT_EQ(refused(file_, ""), "");  // an optional input not given
  EXPECT_EQ(slurp(tmp_input), "an input named like the temporary");
}

}  // namespace
}  // namespace kvq
