#include "kvq/io/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <system_error>

#include "kvq/core/status.h"
#include "kvq/io/file_io.h"

namespace kvq {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr uint64_t kLengthBytes = 8;  // the little-endian u64 header length

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error(ErrorCode::invalid_argument, fmt::format("{}: {}", source, message));
}

[[noreturn]] void fail_tensor(const std::string& source, const std::string& name,
                              const std::string& message) {
  fail(source, fmt::format("tensor '{}': {}", message_text(name), message));
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void write_u64_le(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The u64 at the start of a file of `size` bytes (size >= 8), as a header length.
void check_header_length(const std::string& source, uint64_t header_len, uint64_t size) {
  if (header_len > kSafetensorsMaxHeaderBytes) {
    fail(source, fmt::format("header length {} exceeds the limit of {} bytes", header_len,
                             kSafetensorsMaxHeaderBytes));
  }
  if (header_len > size - kLengthBytes) {
    fail(source, fmt::format("truncated: header length {} but only {} bytes follow it", header_len,
                             size - kLengthBytes));
  }
}

// A JSON value for a message, cut short: a hostile header can make any value huge. Values here
// nest at most one level (parse_header_json refuses deeper headers).
std::string short_dump(const json& v) {
  std::string s;
  if (v.is_array()) {
    s = "[";
    for (size_t i = 0; i < v.size() && s.size() < 64; ++i) s += (i ? "," : "") + v[i].dump();
    s += "]";
  } else if (v.is_object()) {
    s = "{...}";
  } else if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() == 0) {
    s = "-0";  // the only way a signed integer reads as 0
  } else {
    s = v.dump();
  }
  if (s.size() > 64) s = s.substr(0, 60) + " ...";
  return s;
}

// A JSON value as a non-negative int64, or nullopt (negative, fractional, too big, not a number).
std::optional<int64_t> as_index(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(u);
}

// An entry of the header before the data is looked at.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

Entry parse_entry(const std::string& source, const std::string& name, const json& v) {
  if (!v.is_object())
    fail_tensor(source, name, "expected an object with dtype, shape, data_offsets");
  for (const auto& [key, unused] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      fail_tensor(
          source, name,
          fmt::format("unknown key '{}': expected dtype, shape, data_offsets", message_text(key)));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) fail_tensor(source, name, fmt::format("missing '{}'", key));
  }
  Entry e;
  e.name = name;

  const json& dtype = v.at("dtype");
  if (!dtype.is_string()) fail_tensor(source, name, "dtype: expected a string such as \"BF16\"");
  const auto word = dtype.get<std::string>();
  const auto parsed = safetensors_dtype_from_name(word);
  if (!parsed) {
    fail_tensor(source, name,
                fmt::format("dtype '{}' is not supported: expected BF16, F16, F32, I32, I64 or U8",
                            message_text(word)));
  }
  e.dtype = *parsed;

  const json& shape = v.at("shape");
  if (!shape.is_array()) fail_tensor(source, name, "shape: expected an array of sizes");
  for (size_t i = 0; i < shape.size(); ++i) {
    const auto d = as_index(shape[i]);
    if (!d) {
      fail_tensor(
          source, name,
          fmt::format("shape[{}] = {}: expected a non-negative integer", i, short_dump(shape[i])));
    }
    e.shape.push_back(*d);
  }

  const json& offsets = v.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    fail_tensor(source, name,
                fmt::format("data_offsets = {}: expected [begin, end]", short_dump(offsets)));
  }
  const auto begin = as_index(offsets[0]);
  const auto end = as_index(offsets[1]);
  if (!begin || !end || *begin > *end) {
    fail_tensor(source, name,
                fmt::format("data_offsets = {}: expected [begin, end] with 0 <= begin <= end",
                            short_dump(offsets)));
  }
  e.begin = static_cast<uint64_t>(*begin);
  e.end = static_cast<uint64_t>(*end);

  // numel * element size, overflow-checked: the shape is as untrusted as the offsets.
  uint64_t bytes = static_cast<uint64_t>(dtype_size(e.dtype));
  for (int64_t d : e.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > static_cast<uint64_t>(INT64_MAX)) {
      fail_tensor(source, name, fmt::format("shape {} overflows 64-bit sizes", short_dump(shape)));
    }
  }
  if (bytes != e.end - e.begin) {
    fail_tensor(source, name,
                fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                            short_dump(shape), word, bytes, e.begin, e.end, e.end - e.begin));
  }
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string& source, const json& v) {
  if (!v.is_object()) fail(source, "__metadata__: expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      fail(source, fmt::format("__metadata__['{}'] = {}: expected a string", message_text(key),
                               short_dump(value)));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// A safetensors header nests three levels: {name: {"shape": [sizes]}}. Deeper containers are
// refused while parsing, before a hostile 100 MB header of brackets can cost gigabytes.
constexpr int kMaxContainerDepth = 3;  // the root object, a tensor's entry, its shape array

// The checks a JSON parser does not make, in one streaming pass before the header is parsed into
// a tree: nesting depth, and duplicate names at any level (JSON parsers silently keep one of them,
// which would let two readers of one file see different tensors). A SAX pass rather than
// json::parse's callback, whose cost grows with the square of the number of tensors (the library
// re-scans the root object each time an entry ends: a 4.6 MB header of 80,000 entries took 51 s).
class HeaderChecks : public nlohmann::json_sax<json> {
 public:
  std::string problem;  // empty: the header passed

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return deeper();
  }
  bool key(string_t& name) override {
    if (!keys_.back().insert(name).second) {
      problem = fmt::format("header has the key '{}' twice", message_text(name));
      return false;
    }
    // The tree json::parse builds next costs about 800 bytes an entry: 1.76 million empty
    // tensors in a 100 MB header took 1.5 GB. A model shard names a few thousand.
    if (keys_.size() == 1 && name != kMetadataKey && ++tensors_ > kSafetensorsMaxTensors) {
      problem = fmt::format("header names more than {} tensors", kSafetensorsMaxTensors);
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return deeper(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    problem = fmt::format("header is not valid JSON: {}", e.what());
    return false;
  }

 private:
  bool deeper() {
    if (++depth_ <= kMaxContainerDepth) return true;
    problem = fmt::format("header nests deeper than a safetensors header ({} levels)",
                          kMaxContainerDepth);
    return false;
  }
  int depth_ = 0;
  std::size_t tensors_ = 0;                  // the root object's keys but __metadata__
  std::vector<std::set<std::string>> keys_;  // [object depth] names seen in the open object
};

// Parses the JSON header after HeaderChecks. A NUL byte would end the parser's input early and
// hide what follows it (a second header, say), so it is refused first.
json parse_header_json(const std::string& source, const uint8_t* p, size_t n) {
  // The format's own rule, which the reference reader enforces: a byte-order mark or spaces
  // before the object would pass nlohmann and fail there.
  if (n == 0 || p[0] != '{') {
    fail(source,
         fmt::format("header starts with {}: expected '{{' (a JSON object, nothing before it)",
                     n == 0 ? "nothing" : fmt::format("byte 0x{:02x}", p[0])));
  }
  if (std::memchr(p, 0, n) != nullptr) {
    fail(source, "header contains a NUL byte: expected JSON text padded with spaces");
  }
  HeaderChecks checks;
  if (!json::sax_parse(p, p + n, &checks) || !checks.problem.empty()) fail(source, checks.problem);
  json header;
  try {
    header = json::parse(p, p + n);
  } catch (const json::exception& e) {
    fail(source, fmt::format("header is not valid JSON: {}", e.what()));
  }
  return header;
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f32: return "F32";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  for (DType t : {DType::bf16, DType::f16, DType::f32, DType::u8, DType::i32, DType::i64}) {
    if (safetensors_dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

TensorView SafetensorsTensor::view() const {
  if (shape.size() > static_cast<size_t>(TensorView::kMaxDims)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tensor '{}' has {} dimensions: at most {} supported",
                            message_text(name), shape.size(), TensorView::kMaxDims));
  }
  TensorView v;
  v.data = const_cast<uint8_t*>(bytes.data());
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  // A tensor with a zero dimension holds no bytes whatever its other sizes, so the file may give
  // sizes whose product overflows: its strides are refused rather than wrapped.
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = stride;
    if (d > 0 && __builtin_mul_overflow(stride, shape[d], &stride)) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("tensor '{}': shape {} overflows 64-bit strides", message_text(name),
                              fmt::join(shape, "x")));
    }
  }
  return v;
}

SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::load(const std::filesystem::path& file) {
  const std::string source = file.string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    throw Error(ErrorCode::not_found, fmt::format("{}: no such file", source));
  }
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("{}: {}: expected a safetensors file", source,
                    std::filesystem::is_directory(file, ec) ? "a folder" : "not a regular file"));
  }
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;  // what open(2) said; 0 where the library did not say
    throw Error(ErrorCode::io, fmt::format("{}: cannot open for reading: {}", source,
                                           err != 0 ? std::strerror(err) : "reason unknown"));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error(ErrorCode::io, fmt::format("{}: cannot tell its size", source));
  in.seekg(0, std::ios::beg);
  // The header length first: a file that is not safetensors (or a damaged one) is refused from
  // its first 8 bytes, not after all of it has been read.
  uint8_t length[kLengthBytes];
  if (size >= static_cast<std::streamoff>(kLengthBytes)) {
    if (!in.read(reinterpret_cast<char*>(length), kLengthBytes)) {
      throw Error(ErrorCode::io, fmt::format("{}: read failed", source));
    }
    check_header_length(source, read_u64_le(length), static_cast<uint64_t>(size));
    in.seekg(0, std::ios::beg);
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::io, fmt::format("{}: cannot hold its {} bytes in memory", source, size));
  }
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw Error(ErrorCode::io, fmt::format("{}: read failed", source));
  }
  return parse(std::move(bytes), source);
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, std::string source) {
  SafetensorsFile f;
  f.source_ = std::move(source);
  f.bytes_ = std::move(bytes);
  const std::string& src = f.source_;
  const uint64_t size = f.bytes_.size();

  if (size < kLengthBytes) {
    fail(src, fmt::format("truncated: {} bytes, expected at least 8 (the header length)", size));
  }
  const uint64_t header_len = read_u64_le(f.bytes_.data());
  check_header_length(src, header_len, size);
  const uint64_t data_start = kLengthBytes + header_len;
  const uint64_t data_size = size - data_start;

  const json header = parse_header_json(src, f.bytes_.data() + kLengthBytes, header_len);

  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      f.metadata_ = parse_metadata(src, value);
    } else {
      entries.push_back(parse_entry(src, key, value));
    }
  }

  // The tensors must tile [0, data_size) exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_size) {
      fail_tensor(src, e.name,
                  fmt::format("data_offsets [{}, {}] run past the data buffer of {} bytes{}",
                              e.begin, e.end, data_size, " (file truncated?)"));
    }
    if (e.begin < covered) {
      fail_tensor(src, e.name,
                  fmt::format("data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", e.begin,
                              e.end, message_text(previous->name), previous->begin, previous->end));
    }
    if (e.begin > covered) {
      fail_tensor(src, e.name,
                  fmt::format("data_offsets [{}, {}] leave bytes [{}, {}) that no tensor covers",
                              e.begin, e.end, covered, e.begin));
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    fail(src, fmt::format("{} bytes after the last tensor's data (tensors cover [0, {}) of {})",
                          data_size - covered, covered, data_size));
  }

  f.tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    const uint8_t* p = f.bytes_.data() + data_start + e.begin;
    const size_t n = e.end - e.begin;
    const auto align = static_cast<uintptr_t>(dtype_size(e.dtype));
    if (reinterpret_cast<uintptr_t>(p) % align != 0) {
      // Any offset is legal in the format; typed access needs natural alignment, so copy.
      auto copy = std::make_unique<uint64_t[]>((n + 7) / 8);
      std::memcpy(copy.get(), p, n);
      p = reinterpret_cast<const uint8_t*>(copy.get());
      f.realigned_.push_back(std::move(copy));
    }
    f.tensors_.push_back(SafetensorsTensor{std::move(e.name), e.dtype, std::move(e.shape), {p, n}});
  }
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const noexcept {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const SafetensorsTensor& SafetensorsFile::at(std::string_view name) const {
  if (const auto* t = find(name)) return *t;
  // The first few names: a file may hold a million tensors, and the message is one line.
  constexpr std::size_t kNamesShown = 8;
  std::string names;
  for (std::size_t i = 0; i < std::min(tensors_.size(), kNamesShown); ++i) {
    names += (i ? ", " : "") + message_text(tensors_[i].name);
  }
  if (tensors_.size() > kNamesShown) {
    names += fmt::format(" and {} more", tensors_.size() - kNamesShown);
  }
  throw Error(ErrorCode::not_found,
              fmt::format("{}: no tensor '{}' (has: {})", source_, message_text(name),
                          names.empty() ? "none" : names));
}

namespace {

// A host view's elements in row-major order: its own memory when contiguous, else gathered into
// `scratch`.
std::span<const std::byte> elements_of(const TensorView& v, std::vector<uint8_t>& scratch) {
  const auto elem = static_cast<size_t>(dtype_size(v.dtype));
  const int64_t n = v.numel();
  if (n == 0) return {};
  const auto* base = static_cast<const uint8_t*>(v.data);
  if (v.is_contiguous()) {
    return std::as_bytes(std::span(base, static_cast<size_t>(n) * elem));
  }
  scratch.resize(static_cast<size_t>(n) * elem);
  uint8_t* out = scratch.data();
  std::array<int64_t, TensorView::kMaxDims> index{};
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < v.ndim; ++d) offset += index[d] * v.strides[d];
    std::memcpy(out + static_cast<size_t>(i) * elem, base + offset * static_cast<int64_t>(elem),
                elem);
    for (int d = v.ndim - 1; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  return std::as_bytes(std::span(scratch));
}

// What precedes the tensors' bytes: the header's length (8 bytes, little-endian) and the JSON
// header, padded with spaces so that the data starts 8-byte aligned. Checks every tensor.
std::vector<uint8_t> header_bytes(const std::vector<NamedTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, v] : tensors) {
    auto bad = [&](const std::string& why) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("safetensors tensor '{}': {}", name, why));
    };
    if (name.empty()) bad("empty name");
    if (name == kMetadataKey) bad("the name is reserved for the metadata");
    if (!names.insert(name).second) bad("given twice");
    if (v.device.is_cuda()) bad(fmt::format("is on {}: expected host memory", to_string(v.device)));
    if (v.ndim < 0 || v.ndim > TensorView::kMaxDims) bad(fmt::format("ndim {}", v.ndim));
    json shape = json::array();
    uint64_t bytes = static_cast<uint64_t>(dtype_size(v.dtype));
    if (bytes == 0) bad("unknown dtype");
    for (int d = 0; d < v.ndim; ++d) {
      if (v.shape[d] < 0) bad(fmt::format("shape[{}] = {}: expected >= 0", d, v.shape[d]));
      shape.push_back(v.shape[d]);
      const auto size = static_cast<uint64_t>(v.shape[d]);
      if (size != 0 && bytes > std::numeric_limits<uint64_t>::max() / size) {
        bad("its size in bytes overflows 64 bits");
      }
      bytes *= size;
    }
    if (bytes > std::numeric_limits<uint64_t>::max() - offset) {
      bad("the file's size in bytes overflows 64 bits");
    }
    if (bytes > 0 && v.data == nullptr) bad("null data");
    header[name] = {{"dtype", std::string(safetensors_dtype_name(v.dtype))},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // a name or metadata string that is not UTF-8
    throw Error(ErrorCode::invalid_argument,
                fmt::format("safetensors header cannot be written: {}", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out(kLengthBytes + text.size());
  write_u64_le(out.data(), text.size());
  std::memcpy(out.data() + kLengthBytes, text.data(), text.size());
  return out;
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> out = header_bytes(tensors, metadata);
  std::vector<uint8_t> scratch;
  for (const auto& t : tensors) {
    const auto elements = elements_of(t.view, scratch);
    const auto* p = reinterpret_cast<const uint8_t*>(elements.data());
    out.insert(out.end(), p, p + elements.size());
  }
  return out;
}

void save_safetensors(const std::filesystem::path& file, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Written from the tensors' own memory, not from a serialized copy: a cache of several GB needs
  // no second buffer of its size. Only a strided view is gathered.
  const std::vector<uint8_t> header = header_bytes(tensors, metadata);
  std::vector<std::vector<uint8_t>> gathered(tensors.size());
  std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span(header))};
  for (size_t i = 0; i < tensors.size(); ++i) {
    try {
      pieces.push_back(elements_of(tensors[i].view, gathered[i]));
    } catch (const std::bad_alloc&) {
      throw Error(
          ErrorCode::io,
          fmt::format("{}: cannot hold a contiguous copy of tensor '{}' ({} bytes) to write "
                      "it",
                      file.string(), message_text(tensors[i].name),
                      tensors[i].view.numel() * dtype_size(tensors[i].view.dtype)));
    }
  }
  write_file_atomically(file, pieces);
}

}  // namespace kvq
