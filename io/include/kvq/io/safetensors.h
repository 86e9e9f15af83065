#pragma once
// safetensors files (https://github.com/huggingface/safetensors): what `kvq write` / `kvq read`
// take and give. The format:
//   [8 bytes: N, little-endian u64] [N bytes: JSON header] [data buffer]
//   header = { "__metadata__": {str: str}?, NAME: {"dtype": "F32", "shape": [..],
//              "data_offsets": [begin, end]}, ... }
// Offsets are relative to the start of the data buffer. The tensors must tile the buffer exactly:
// no overlap, no hole, nothing after the last one (the format's rule against polyglot files).
//
// Loading trusts no length or offset from the file: everything is checked against the real size
// before any byte is touched, and every failure throws kvq::Error (invalid_argument) naming the
// file and, where there is one, the tensor.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/export.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

// Headers larger than this are refused (the same bound as the reference implementation).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Tensors one file may name (the parsed header's memory grows with them).
inline constexpr std::size_t kSafetensorsMaxTensors = 1 << 17;

// The safetensors name of a dtype ("BF16", "F16", "F32", "I32", "I64", "U8"), and back
// (std::nullopt for any other word, including dtypes kvq does not handle such as "F64").
KVQ_API std::string_view safetensors_dtype_name(DType t);
KVQ_API std::optional<DType> safetensors_dtype_from_name(std::string_view name);

// One tensor of a loaded file.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::u8;
  std::vector<int64_t> shape;      // may be empty (a scalar)
  std::span<const uint8_t> bytes;  // numel * dtype_size bytes, aligned to dtype_size

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // A contiguous host view of the bytes (read-only in spirit: TensorView has no const). Throws
  // kvq::Error when the tensor has more than TensorView::kMaxDims dimensions.
  KVQ_API TensorView view() const;
};

// A loaded file: owns its bytes; tensors are views into them. Movable, not copyable (the spans
// point into the owned buffer, which a move keeps in place).
class KVQ_API SafetensorsFile {
 public:
  // Reads and checks the whole file. Throws kvq::Error: not_found when it does not exist, io when
  // it cannot be read, invalid_argument when it is not a valid safetensors file.
  static SafetensorsFile load(const std::filesystem::path& file);
  // The same checks on bytes already in memory; `source` names them in messages.
  static SafetensorsFile parse(std::vector<uint8_t> bytes, std::string source = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& source() const noexcept { return source_; }
  // In the order of their data offsets.
  const std::vector<SafetensorsTensor>& tensors() const noexcept { return tensors_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  const SafetensorsTensor* find(std::string_view name) const noexcept;
  // Throws kvq::Error (not_found) "FILE: no tensor 'NAME' (has: a, b, c)".
  const SafetensorsTensor& at(std::string_view name) const;

 private:
  SafetensorsFile() = default;

  std::string source_;
  std::vector<uint8_t> bytes_;                          // the whole file
  std::vector<std::unique_ptr<uint64_t[]>> realigned_;  // copies of misaligned tensors
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to save: any host view (contiguous or not; non-contiguous ones are gathered).
struct NamedTensor {
  std::string name;
  TensorView view;
};

// The bytes of a safetensors file holding `tensors` (in the given order) and `metadata` (written
// as __metadata__ when not empty). The header is padded with spaces to a multiple of 8 bytes so
// that every tensor starts 8-byte aligned. Throws kvq::Error (invalid_argument) for an empty,
// duplicate or reserved name, a device tensor, a negative size or an unsupported dtype.
KVQ_API std::vector<uint8_t> serialize_safetensors(
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// serialize_safetensors + write_file_atomically to `file` (file_io.h: whole or not at all, an
// existing `file` untouched on failure; throws kvq::Error io naming the file and the reason, or
// invalid_argument for an existing `file` that is not a regular file).
KVQ_API void save_safetensors(const std::filesystem::path& file,
                              const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace kvq
