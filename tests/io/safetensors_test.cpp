// safetensors reading and writing: exact bytes written, every tensor and metadata read back, and
// one test per way a file can be malformed, each asserting the message.
#include "kvq/io/safetensors.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kvq/core/status.h"
#include "safetensors_test_util.h"

namespace kvq {
namespace {

using test::expect_invalid;
using test::file_bytes;

TEST(SafetensorsWrite, ExactBytesOfOneSmallTensor) {
  uint8_t data[3] = {7, 8, 9};
  const auto bytes = serialize_safetensors({{"a", make_view(data, DType::u8, {3})}});
  // nlohmann writes object keys sorted; the header is padded with spaces to a multiple of 8.
  const std::string header = R"({"a":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}})";
  ASSERT_EQ(header.size(), 53u);
  const std::string padded = header + "   ";  // 56 = 7 * 8
  std::vector<uint8_t> expect = {56, 0, 0, 0, 0, 0, 0, 0};
  expect.insert(expect.end(), padded.begin(), padded.end());
  expect.insert(expect.end(), {7, 8, 9});
  EXPECT_EQ(bytes, expect);
}

// A header already a multiple of 8 bytes gets no padding (not 8 spaces more): the bytes stay
// the same as other writers' for the same tensors.
TEST(SafetensorsWrite, HeaderOfAMultipleOfEightIsNotPadded) {
  uint8_t data[3] = {7, 8, 9};
  const auto bytes = serialize_safetensors({{"abcd", make_view(data, DType::u8, {3})}});
  const std::string header = R"({"abcd":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}})";
  ASSERT_EQ(header.size(), 56u);
  std::vector<uint8_t> expect = {56, 0, 0, 0, 0, 0, 0, 0};
  expect.insert(expect.end(), header.begin(), header.end());
  expect.insert(expect.end(), {7, 8, 9});
  EXPECT_EQ(bytes, expect);
}

TEST(SafetensorsWrite, MetadataIsWrittenUnderItsKey) {
  uint8_t data[1] = {1};
  const auto bytes =
      serialize_safetensors({{"x", make_view(data, DType::u8, {1})}}, {{"format", "nvfp4"}});
  const std::string text(bytes.begin() + 8, bytes.end() - 1);
  EXPECT_NE(text.find(R"("__metadata__":{"format":"nvfp4"})"), std::string::npos) << text;
}

TEST(SafetensorsRoundTrip, EveryDtypeScalarEmptyAndStridedViews) {
  std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x0000, 0x7f80, 0x4000, 0x4040};  // [2, 3]
  std::vector<uint16_t> f16 = {0x3c00, 0xc000};
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f};
  std::vector<int32_t> i32 = {-1, 2, 2147483647};
  std::vector<int64_t> i64 = {-5, INT64_MAX};
  std::vector<uint8_t> u8 = {0, 255, 17};
  float scalar = 0.0625f;
  // A [3, 2] view that is the transpose of a contiguous [2, 3] f32 buffer: must be gathered.
  std::vector<float> base = {1, 2, 3, 4, 5, 6};
  TensorView transposed = make_view(base.data(), DType::f32, {3, 2});
  transposed.strides = {1, 3, 0, 0};

  const std::vector<NamedTensor> tensors = {
      {"bf16", make_view(bf16.data(), DType::bf16, {2, 3})},
      {"f16", make_view(f16.data(), DType::f16, {2})},
      {"f32", make_view(f32.data(), DType::f32, {2, 1, 2})},
      {"i32", make_view(i32.data(), DType::i32, {3})},
      {"i64", make_view(i64.data(), DType::i64, {2})},
      {"u8", make_view(u8.data(), DType::u8, {3})},
      {"scalar", make_view(&scalar, DType::f32, {})},
      {"empty", make_view(nullptr, DType::f32, {0, 4})},
      {"transposed", transposed},
  };
  const auto f = SafetensorsFile::parse(serialize_safetensors(tensors, {{"k", "v"}, {"a", ""}}),
                                        "round.safetensors");
  EXPECT_EQ(f.source(), "round.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"k", "v"}, {"a", ""}}));
  ASSERT_EQ(f.tensors().size(), tensors.size());

  auto expect_tensor = [&](const std::string& name, DType dtype, std::vector<int64_t> shape,
                           const void* data, size_t bytes) {
    SCOPED_TRACE(name);
    const SafetensorsTensor& t = f.at(name);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, shape);
    ASSERT_EQ(t.bytes.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes.data()) % dtype_size(dtype), 0u);
    if (bytes != 0) {
      EXPECT_EQ(std::memcmp(t.bytes.data(), data, bytes), 0);
    }
    const TensorView v = t.view();
    EXPECT_EQ(v.ndim, static_cast<int>(shape.size()));
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.data, t.bytes.data());
  };
  expect_tensor("bf16", DType::bf16, {2, 3}, bf16.data(), 12);
  expect_tensor("f16", DType::f16, {2}, f16.data(), 4);
  expect_tensor("f32", DType::f32, {2, 1, 2}, f32.data(), 16);
  expect_tensor("i32", DType::i32, {3}, i32.data(), 12);
  expect_tensor("i64", DType::i64, {2}, i64.data(), 16);
  expect_tensor("u8", DType::u8, {3}, u8.data(), 3);
  expect_tensor("scalar", DType::f32, {}, &scalar, 4);
  expect_tensor("empty", DType::f32, {0, 4}, nullptr, 0);
  const std::vector<float> gathered = {1, 4, 2, 5, 3, 6};
  expect_tensor("transposed", DType::f32, {3, 2}, gathered.data(), 24);
}

TEST(SafetensorsRoundTrip, SaveAndLoadAFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvq_io_test_" + std::to_string(::getpid()) + ".safetensors");
  std::vector<int64_t> slots = {3, -1, 40};
  save_safetensors(path, {{"slot_mapping", make_view(slots.data(), DType::i64, {3})}},
                   {{"note", "hi"}});
  const auto f = SafetensorsFile::load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(f.source(), path.string());
  const auto& t = f.at("slot_mapping");
  ASSERT_EQ(t.bytes.size(), 24u);
  EXPECT_EQ(t.view().ptr<int64_t>()[2], 40);
  EXPECT_EQ(f.metadata().at("note"), "hi");
}

TEST(SafetensorsRoundTrip, MovedFileKeepsItsViews) {
  std::vector<float> x = {1, 2, 3};
  auto a =
      SafetensorsFile::parse(serialize_safetensors({{"x", make_view(x.data(), DType::f32, {3})}}));
  const uint8_t* before = a.at("x").bytes.data();
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.at("x").bytes.data(), before);
  EXPECT_EQ(b.at("x").view().ptr<float>()[2], 3.0f);
}

TEST(SafetensorsRead, TensorsAreOrderedByOffset) {
  const auto f = SafetensorsFile::parse(file_bytes(
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
      {1, 2, 3}));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "b");
  EXPECT_EQ(f.tensors()[1].name, "a");
}

TEST(SafetensorsRead, MisalignedTensorsAreCopiedToAlignedMemory) {
  // Header of 5 bytes ({} + ...) puts the data at file offset 13: the F32 is misaligned in the
  // file but must be readable as float.
  float value = 2.5f;
  std::vector<uint8_t> data(1 + 4);
  data[0] = 42;
  std::memcpy(data.data() + 1, &value, 4);
  const auto f = SafetensorsFile::parse(file_bytes(
      R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[],"data_offsets":[1,5]}})",
      data));
  const auto& t = f.at("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes.data()) % 4, 0u);
  EXPECT_EQ(t.view().ptr<float>()[0], 2.5f);
  EXPECT_EQ(f.at("u").bytes[0], 42);
}

TEST(SafetensorsRead, WhitespacePaddedHeaderAndNoTensors) {
  const auto f = SafetensorsFile::parse(file_bytes(R"({"__metadata__":{"a":"b"}}    )", {}));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata().at("a"), "b");
}

TEST(SafetensorsRead, MissingTensorListsWhatIsThere) {
  const auto f = SafetensorsFile::parse(
      file_bytes(R"({"key":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {0}), "in.st");
  try {
    (void)f.at("value");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_STREQ(e.what(), "in.st: no tensor 'value' (has: key)");
  }
  EXPECT_EQ(f.find("value"), nullptr);
}

// A file of many tensors lists only the first few: the message stays one short line.
TEST(SafetensorsRead, MissingTensorListsAtMostEightNames) {
  std::string header = "{";
  for (int i = 0; i < 20; ++i) {  // in file order (tensors are listed by offset)
    header += fmt::format(R"({}"t{:02}":{{"dtype":"U8","shape":[1],"data_offsets":[{},{}]}})",
                          i ? "," : "", i, i, i + 1);
  }
  const auto f =
      SafetensorsFile::parse(file_bytes(header + "}", std::vector<uint8_t>(20)), "in.st");
  try {
    (void)f.at("value");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "in.st: no tensor 'value' (has: t00, t01, t02, t03, t04, t05, t06, t07 and 12 "
                 "more)");
  }
}

// 100,000 entries parse in one linear pass (json::parse's callback form re-scanned the root object
// at every entry's end: 80,000 took 51 s on a 2-core VM).
TEST(SafetensorsRead, ManyTensorsParse) {
  std::string header = "{";
  for (int i = 0; i < 100'000; ++i) {
    header += fmt::format(R"({}"t{}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})",
                          i ? "," : "", i);
  }
  const auto f = SafetensorsFile::parse(file_bytes(header + "}", {}));
  EXPECT_EQ(f.tensors().size(), 100'000u);
}

// Past kSafetensorsMaxTensors entries the header is refused in the streaming pass, before the
// tree that would cost about 800 bytes an entry is built.
TEST(SafetensorsRead, MoreTensorsThanTheLimitAreRefused) {
  std::string header = "{";
  for (std::size_t i = 0; i <= kSafetensorsMaxTensors; ++i) {
    header += fmt::format(R"({}"t{}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})",
                          i ? "," : "", i);
  }
  try {
    (void)SafetensorsFile::parse(file_bytes(header + "}", {}), "many.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()), "many.safetensors: header names more than " +
                                         std::to_string(kSafetensorsMaxTensors) + " tensors");
  }
}

// A zero-size tensor may give sizes whose product overflows; its view is refused, not wrapped.
TEST(SafetensorsRead, ViewWhoseStridesOverflowIsRefused) {
  const auto f = SafetensorsFile::parse(file_bytes(
      R"({"t":{"dtype":"U8","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})", {}));
  try {
    (void)f.at("t").view();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_STREQ(e.what(),
                 "tensor 't': shape 0x1099511627776x1099511627776 overflows 64-bit strides");
  }
}

TEST(SafetensorsRead, ViewOfMoreThanFourDimensionsIsRefused) {
  const auto f = SafetensorsFile::parse(
      file_bytes(R"({"t":{"dtype":"U8","shape":[1,1,1,1,1],"data_offsets":[0,1]}})", {0}));
  EXPECT_EQ(f.at("t").shape.size(), 5u);
  EXPECT_THROW((void)f.at("t").view(), Error);
}

TEST(SafetensorsLoad, MissingFileIsNotFound) {
  try {
    (void)SafetensorsFile::load("/nonexistent/dir/x.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_STREQ(e.what(), "/nonexistent/dir/x.safetensors: no such file");
  }
}

// A file that is there but cannot be opened says why: what open(2) said. Out of file descriptors
// (the limit lowered to the lowest free one) fails for every user, root included.
TEST(SafetensorsLoad, FileThatCannotBeOpenedSaysWhy) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvq_io_test_nofd_" + std::to_string(::getpid()) + ".safetensors");
  save_safetensors(path, {});
  const int lowest_free = ::dup(STDERR_FILENO);
  ASSERT_GE(lowest_free, 0) << std::strerror(errno);
  ::close(lowest_free);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lower = saved;
  lower.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lower), 0) << std::strerror(errno);
  std::string message;
  ErrorCode code = ErrorCode::ok;
  try {
    (void)SafetensorsFile::load(path);
  } catch (const Error& e) {
    message = e.what();
    code = e.code();
  } catch (...) {  // the limit goes back before anything else can fail for want of a descriptor
    ::setrlimit(RLIMIT_NOFILE, &saved);
    throw;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0) << std::strerror(errno);
  std::filesystem::remove(path);
  EXPECT_EQ(code, ErrorCode::io);
  EXPECT_EQ(message, path.string() + ": cannot open for reading: " + std::strerror(EMFILE));
}

// The common case, a file without read permission (root may read it: skipped there).
TEST(SafetensorsLoad, UnreadableFileSaysPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which may read a file of mode 000";
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvq_io_test_000_" + std::to_string(::getpid()) + ".safetensors");
  save_safetensors(path, {});
  std::filesystem::permissions(path, std::filesystem::perms::none);
  std::string message;
  try {
    (void)SafetensorsFile::load(path);
  } catch (const Error& e) {
    message = e.what();
  }
  std::filesystem::remove(path);
  EXPECT_EQ(message, path.string() + ": cannot open for reading: " + std::strerror(EACCES));
}

// ---- malformed files: each error names the file (and the tensor) and says what is wrong ----

TEST(SafetensorsErrors, TooShortForTheLength) {
  expect_invalid({1, 2, 3}, "f.st: truncated: 3 bytes, expected at least 8 (the header length)");
}

TEST(SafetensorsErrors, HeaderLengthPastTheEnd) {
  auto bytes = file_bytes(R"({})", {});
  bytes[0] = 200;
  expect_invalid(bytes, "f.st: truncated: header length 200 but only 2 bytes follow it");
}

TEST(SafetensorsErrors, HeaderOver100MB) {
  std::vector<uint8_t> bytes = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0};  // 100'000'001
  expect_invalid(bytes, "f.st: header length 100000001 exceeds the limit of 100000000 bytes");
  std::vector<uint8_t> huge(8, 0xff);
  expect_invalid(huge, "f.st: header length 18446744073709551615 exceeds the limit");
}

TEST(SafetensorsErrors, BadJson) {
  expect_invalid(file_bytes(R"({"a":)", {}), "f.st: header is not valid JSON: ");
  expect_invalid(file_bytes("{\xff\xfe}", {}), "f.st: header is not valid JSON: ");
}

// The format's header is a JSON object from its first byte. nlohmann alone would skip a UTF-8
// byte-order mark and leading spaces, which the reference reader refuses.
TEST(SafetensorsErrors, HeaderNotStartingWithABrace) {
  expect_invalid(file_bytes("[1, 2]", {}),
                 "f.st: header starts with byte 0x5b: expected '{' (a JSON object, nothing before "
                 "it)");
  expect_invalid(file_bytes("\xef\xbb\xbf{}", {}), "f.st: header starts with byte 0xef: ");
  expect_invalid(file_bytes(" {}", {}), "f.st: header starts with byte 0x20: ");
  expect_invalid(file_bytes("", {}), "f.st: header starts with nothing: ");
}

// Names and words from the file are shown escaped and cut short: a name cannot forge a second
// line of output or flood it.
TEST(SafetensorsErrors, NamesInMessagesAreEscapedAndCut) {
  expect_invalid(
      file_bytes(R"({"a\nkvq: fine":{"dtype":"X8","shape":[1],"data_offsets":[0,1]}})", {0}),
      "f.st: tensor 'a\\nkvq: fine': dtype 'X8' is not supported");
  const std::string long_name(100'000, 'n');
  expect_invalid(
      file_bytes("{\"" + long_name + R"(":{"dtype":"X8","shape":[1],"data_offsets":[0,1]}})", {0}),
      "f.st: tensor '" + std::string(64, 'n') + "...': dtype 'X8' is not supported");
}

// The parser would stop at a NUL and never see what follows it (here a second, different entry).
TEST(SafetensorsErrors, NulByteInTheHeader) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  header += '\0';
  header += R"({"a":"hidden"})";
  expect_invalid(file_bytes(header, {0}),
                 "f.st: header contains a NUL byte: expected JSON text padded with spaces");
}

TEST(SafetensorsErrors, NestingDeeperThanTheFormat) {
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", {0}),
                 "f.st: header nests deeper than a safetensors header (3 levels)");
  // A megabyte of brackets is refused at the fourth, not parsed into a million nested arrays.
  expect_invalid(file_bytes("{\"a\":" + std::string(1'000'000, '['), {}),
                 "f.st: header nests deeper than a safetensors header (3 levels)");
  expect_invalid(file_bytes(R"({"__metadata__":{"a":{"b":[1]}}})", {}),
                 "f.st: header nests deeper than a safetensors header (3 levels)");
  expect_invalid(file_bytes(R"({"__metadata__":{"a":{"b":"c"}}})", {}),
                 "f.st: __metadata__['a'] = {...}: expected a string");
}

TEST(SafetensorsErrors, DuplicateNames) {
  expect_invalid(
      file_bytes(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
          {0, 0}),
      "f.st: header has the key 'a' twice");
  expect_invalid(
      file_bytes(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {0}),
      "f.st: header has the key 'dtype' twice");
}

TEST(SafetensorsErrors, UnknownDtype) {
  expect_invalid(
      file_bytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                 std::vector<uint8_t>(8)),
      "f.st: tensor 'w': dtype 'F64' is not supported: expected BF16, F16, F32, I32, I64 or U8");
  expect_invalid(file_bytes(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", {0}),
                 "f.st: tensor 'w': dtype: expected a string");
}

TEST(SafetensorsErrors, BadShapes) {
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", {0}),
                 "f.st: tensor 'w': shape[0] = -1: expected a non-negative integer");
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", {0}),
                 "f.st: tensor 'w': shape[0] = 1.5: expected a non-negative integer");
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[-0],"data_offsets":[0,1]}})", {0}),
                 "f.st: tensor 'w': shape[0] = -0: expected a non-negative integer");
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":2,"data_offsets":[0,1]}})", {0}),
                 "f.st: tensor 'w': shape: expected an array");
  expect_invalid(
      file_bytes(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}})",
                 {0}),
      "f.st: tensor 'w': shape[0] = 18446744073709551615: expected a non-negative integer");
}

TEST(SafetensorsErrors, ShapeSizeMismatch) {
  expect_invalid(
      file_bytes(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                 std::vector<uint8_t>(20)),
      "f.st: tensor 'w': shape [2,3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20");
}

TEST(SafetensorsErrors, ShapeOverflowIsCaughtNotWrapped) {
  // 2^62 * 4 * 4 bytes wraps to 0 in 64 bits: a naive product would accept [0, 0].
  expect_invalid(
      file_bytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
                 {}),
      "f.st: tensor 'w': shape [4611686018427387904,4] overflows 64-bit sizes");
  expect_invalid(
      file_bytes(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
                 {}),
      "f.st: tensor 'w': shape [4294967296,4294967296] overflows 64-bit sizes");
}

TEST(SafetensorsErrors, BadOffsets) {
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", {0}),
                 "f.st: tensor 'w': data_offsets = [1,0]: expected [begin, end] with 0 <= begin");
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", {0}),
                 "f.st: tensor 'w': data_offsets = [0,1,2]: expected [begin, end]");
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", {0}),
                 "f.st: tensor 'w': data_offsets = [-1,0]: expected [begin, end] with 0 <= begin");
}

TEST(SafetensorsErrors, OffsetsPastTheData) {
  expect_invalid(file_bytes(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", {0, 0}),
                 "f.st: tensor 'w': data_offsets [0, 4] run past the data buffer of 2 bytes");
  // Offsets near 2^64 must not wrap around the bounds check.
  expect_invalid(
      file_bytes(
          R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}})",
          {0}),
      "f.st: tensor 'w': data_offsets [9223372036854775806, 9223372036854775807] run past");
}

TEST(SafetensorsErrors, OverlapGapAndTrailingBytes) {
  expect_invalid(
      file_bytes(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
          {0, 0, 0}),
      "f.st: tensor 'b': data_offsets [1, 3] overlap tensor 'a' at [0, 2]");
  expect_invalid(
      file_bytes(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
          {0, 0, 0}),
      "f.st: tensor 'b': data_offsets [2, 3] leave bytes [1, 2) that no tensor covers");
  expect_invalid(file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {0, 0}),
                 "f.st: 1 bytes after the last tensor's data (tensors cover [0, 1) of 2)");
}

TEST(SafetensorsErrors, BadEntries) {
  expect_invalid(file_bytes(R"({"a":3})", {}), "f.st: tensor 'a': expected an object");
  expect_invalid(file_bytes(R"({"a":{"dtype":"U8","shape":[0]}})", {}),
                 "f.st: tensor 'a': missing 'data_offsets'");
  expect_invalid(
      file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"extra":1}})", {}),
      "f.st: tensor 'a': unknown key 'extra'");
}

TEST(SafetensorsErrors, BadMetadata) {
  expect_invalid(file_bytes(R"({"__metadata__":{"a":1}})", {}),
                 "f.st: __metadata__['a'] = 1: expected a string");
  expect_invalid(file_bytes(R"({"__metadata__":[]})", {}),
                 "f.st: __metadata__: expected an object of strings");
}

TEST(SafetensorsWriteErrors, NamesAndDevices) {
  uint8_t x = 0;
  auto expect_refused = [](const std::vector<NamedTensor>& t, const std::string& message) {
    try {
      (void)serialize_safetensors(t);
      ADD_FAILURE() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  const TensorView v = make_view(&x, DType::u8, {1});
  expect_refused({{"a", v}, {"a", v}}, "safetensors tensor 'a': given twice");
  expect_refused({{"", v}}, "safetensors tensor '': empty name");
  expect_refused({{"__metadata__", v}},
                 "safetensors tensor '__metadata__': the name is reserved for the metadata");
  expect_refused({{"d", make_view(&x, DType::u8, {1}, Device::cuda(0))}},
                 "safetensors tensor 'd': is on cuda:0: expected host memory");
}

// A view of 4 elements with no memory behind it is refused with the tensor's name before
// anything is read or written: not a crash, and no file left behind.
TEST(SafetensorsWriteErrors, NullDataIsRefusedWhenSaving) {
  const std::filesystem::path file =
      std::filesystem::path(testing::TempDir()) / ("kvq_null_data_" + std::to_string(::getpid()));
  try {
    save_safetensors(file, {{"n", make_view(nullptr, DType::f32, {4})}});
    ADD_FAILURE() << "saved a tensor with null data";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()), "safetensors tensor 'n': null data");
  }
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace kvq
