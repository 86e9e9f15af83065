#pragma once
// Element types kvq reads and writes. Values are stable: they appear in the plugin ABI.
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvq {

enum class DType : int32_t { bf16 = 0, f16 = 1, f32 = 2, u8 = 3, i32 = 4, i64 = 5 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f32:
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

// Lower-case names used in messages and configs: "bf16", "f16", "f32", "u8", "i32", "i64".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

}  // namespace kvq
