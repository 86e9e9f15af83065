// Corrupted safetensors files: every corruption that makes a file invalid must give a kvq::Error
// (never a crash, a hang or an out-of-bounds read; CI runs this binary under ASan + UBSan too),
// and random damage must give either an error or a file whose views lie inside its bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "kvq/core/status.h"
#include "kvq/io/safetensors.h"
#include "safetensors_test_util.h"

namespace kvq {
namespace {

using nlohmann::json;

// A file like the ones kvq write makes: several dtypes, metadata, every tensor non-empty (so that
// cutting any byte off the end is an error).
struct Base {
  std::vector<uint16_t> key = std::vector<uint16_t>(2 * 1 * 16, 0x3f80);  // [2, 1, 16] bf16
  std::vector<float> value = std::vector<float>(2 * 16, -0.5f);           // [2, 1, 16] f32
  std::vector<int64_t> slots = {5, -1};                                   // [2] i64
  std::vector<int32_t> i32 = {1, 2, 3};
  std::vector<uint8_t> cache = std::vector<uint8_t>(24, 0xab);  // [2, 12] u8
  float k_scale = 0.5f;

  std::vector<uint8_t> bytes() {
    return serialize_safetensors({{"key", make_view(key.data(), DType::bf16, {2, 1, 16})},
                                  {"value", make_view(value.data(), DType::f32, {2, 1, 16})},
                                  {"slot_mapping", make_view(slots.data(), DType::i64, {2})},
                                  {"k_scale", make_view(&k_scale, DType::f32, {})},
                                  {"idx", make_view(i32.data(), DType::i32, {3})},
                                  {"kv_cache", make_view(cache.data(), DType::u8, {2, 12})}},
                                 {{"format", "nvfp4"}, {"block_size", "16"}});
  }
};

volatile unsigned g_sink = 0;

uint64_t header_length(const std::vector<uint8_t>& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f[i];
  return n;
}

std::string header_text(const std::vector<uint8_t>& f) {
  return {f.begin() + 8, f.begin() + 8 + static_cast<std::ptrdiff_t>(header_length(f))};
}

std::vector<uint8_t> data_of(const std::vector<uint8_t>& f) {
  return {f.begin() + 8 + static_cast<std::ptrdiff_t>(header_length(f)), f.end()};
}

// Parses; true when it threw kvq::Error. Any other exception fails the test. When it parsed, every
// view must lie inside memory the file object owns and match its shape.
bool parse_fails(const std::vector<uint8_t>& bytes) {
  try {
    const auto f = SafetensorsFile::parse(bytes, "fuzz.st");
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.numel() * dtype_size(t.dtype))) << t.name;
      // Touch every byte so ASan sees any view that points outside the buffer.
      unsigned sum = 0;
      for (uint8_t b : t.bytes) sum += b;
      g_sink = g_sink + sum;  // volatile: the reads cannot be optimized away
    }
    return false;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("fuzz.st: ", 0), 0u) << e.what();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-kvq exception: " << e.what();
    return true;
  }
}

class SafetensorsFuzz : public ::testing::Test {
 protected:
  Base base;
  std::vector<uint8_t> good = base.bytes();
  int must_fail = 0;  // corrupted files that were required to fail, and did

  void expect_fails(const std::vector<uint8_t>& bytes, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(parse_fails(bytes)) << "a corrupted file was accepted: " << what;
    ++must_fail;
  }
};

TEST_F(SafetensorsFuzz, TheBaseFileIsValid) {
  EXPECT_FALSE(parse_fails(good));
  EXPECT_GT(good.size(), 300u);
}

TEST_F(SafetensorsFuzz, EveryTruncationFails) {
  for (size_t n = 0; n < good.size(); ++n) {
    expect_fails(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)),
                 "truncated to " + std::to_string(n));
  }
  EXPECT_GE(must_fail, 300);
}

TEST_F(SafetensorsFuzz, TruncatedFilesOnDiskFail) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvq_fuzz_" + std::to_string(::getpid()) + ".safetensors");
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, good.size() - 1}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(n));
    }
    try {
      (void)SafetensorsFile::load(path);
      ADD_FAILURE() << "accepted a file truncated to " << n;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": ", 0), 0u) << e.what();
    }
  }
  std::filesystem::remove(path);
}

TEST_F(SafetensorsFuzz, LyingHeaderLengthsFail) {
  const uint64_t n = header_length(good);
  std::vector<uint64_t> lies = {0,
                                1,
                                2,
                                n + good.size(),
                                UINT64_MAX,
                                UINT64_MAX - 7,
                                1ull << 63,
                                kSafetensorsMaxHeaderBytes,
                                kSafetensorsMaxHeaderBytes + 1};
  for (int64_t d = -48; d <= 48; ++d) {
    if (d != 0) lies.push_back(n + static_cast<uint64_t>(d));
  }
  for (uint64_t lie : lies) {
    auto bytes = good;
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(lie >> (8 * i));
    expect_fails(bytes, "header length " + std::to_string(lie));
  }
  EXPECT_GE(must_fail, 100);
}

TEST_F(SafetensorsFuzz, LyingOffsetsFail) {
  const json header = json::parse(header_text(good));
  const std::vector<uint8_t> data = data_of(good);
  const auto data_size = static_cast<int64_t>(data.size());
  const std::vector<std::pair<int64_t, int64_t>> shifts = {{-1, 0},
                                                           {1, 0},
                                                           {0, 1},
                                                           {0, -1},
                                                           {1, 1},
                                                           {-1, -1},
                                                           {8, 8},
                                                           {-8, -8},
                                                           {2, 0},
                                                           {0, 2},
                                                           {data_size, data_size},
                                                           {0, data_size},
                                                           {4096, 4096},
                                                           {1ll << 40, 1ll << 40}};
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    for (const auto& [db, de] : shifts) {
      json lie = header;
      const int64_t b = entry["data_offsets"][0].get<int64_t>() + db;
      const int64_t e = entry["data_offsets"][1].get<int64_t>() + de;
      lie[name]["data_offsets"] = {b, e};
      expect_fails(test::file_bytes(lie.dump(), data),
                   name + " data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "]");
    }
    // The shape lies instead.
    for (int64_t delta : {1, -1, 1000}) {
      json lie = header;
      auto& dims = lie[name]["shape"];
      if (dims.empty()) {
        dims.push_back(2);
      } else {
        dims[0] = std::max<int64_t>(0, dims[0].get<int64_t>() + delta);
      }
      expect_fails(test::file_bytes(lie.dump(), data),
                   name + " shape " + lie[name]["shape"].dump());
    }
  }
  EXPECT_GE(must_fail, 100);
}

TEST_F(SafetensorsFuzz, BrokenHeaderBytesFail) {
  // Every structural character and every digit outside strings, replaced: invalid JSON, or a
  // size/offset that no longer adds up. And the first letter of every dtype.
  const std::string header = header_text(good);
  bool in_string = false;
  bool after_dtype_key = false;
  std::string last_string;
  for (size_t i = 0; i < header.size(); ++i) {
    const char c = header[i];
    char replacement = 0;
    if (c == '"') {
      if (!in_string && after_dtype_key) {
        auto bytes = good;
        bytes[8 + i + 1] = 'Z';  // "BF16" -> "ZF16": not a dtype
        expect_fails(bytes, "dtype letter at " + std::to_string(i + 1));
      }
      if (in_string) {
        after_dtype_key = last_string == "dtype";
        last_string.clear();
      } else {
        after_dtype_key = false;
      }
      in_string = !in_string;
      replacement = 'x';
    } else if (in_string) {
      last_string += c;
      continue;
    } else if (std::strchr("{}[]:,", c) != nullptr) {
      replacement = 'x';
    } else if (c >= '0' && c <= '9') {
      replacement = static_cast<char>('0' + (c - '0' + 1) % 10);
    }
    if (replacement == 0) continue;
    auto bytes = good;
    bytes[8 + i] = static_cast<uint8_t>(replacement);
    expect_fails(bytes,
                 "header byte " + std::to_string(i) + " '" + c + "' -> '" + replacement + "'");
  }
  EXPECT_GE(must_fail, 200);
}

TEST_F(SafetensorsFuzz, RandomDamageNeverCrashes) {
  // Bit flips, byte insertions and deletions anywhere, with a fixed seed: these may or may not
  // leave a valid file (a flipped data byte does), but must never crash.
  std::mt19937_64 rng(20261202);
  int failed = 0;
  const int cases = 2000;
  for (int c = 0; c < cases; ++c) {
    auto bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !bytes.empty(); ++k) {
      // Mostly the length and header, where the parsing is.
      const size_t span =
          (rng() % 4 == 0) ? bytes.size() : std::min<size_t>(bytes.size(), 8 + header_length(good));
      const size_t at = rng() % span;
      switch (rng() % 4) {
        case 0:
        case 1: bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                       static_cast<uint8_t>(rng()));
          break;
        case 3: bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at)); break;
      }
    }
    if (parse_fails(bytes)) ++failed;
  }
  // Most damage is detected; the exact number is a property of the seed, not of correctness.
  EXPECT_GT(failed, cases / 2);
  RecordProperty("detected", failed);
}

}  // namespace
}  // namespace kvq
