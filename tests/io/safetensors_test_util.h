#pragma once
// Building safetensors files byte by byte for the io tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/status.h"
#include "kvq/io/safetensors.h"

namespace kvq::test {

// [8-byte little-endian length of `header`] [header] [data]
inline std::vector<uint8_t> file_bytes(const std::string& header,
                                       const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  return out;
}

// Parsing `bytes` (as file "f.st") fails with invalid_argument and a message starting with
// `prefix`.
inline void expect_invalid(const std::vector<uint8_t>& bytes, const std::string& prefix) {
  try {
    (void)SafetensorsFile::parse(bytes, "f.st");
    ADD_FAILURE() << "expected an error starting with: " << prefix;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix);
  }
}

}  // namespace kvq::test
