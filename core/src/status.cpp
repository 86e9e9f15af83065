#include "kvq/core/status.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvq {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::out_of_range: return "out of range";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::io: return "i/o error";
    case ErrorCode::runtime: return "runtime error";
    case ErrorCode::internal: return "internal error";
  }
  return "unknown error";
}

std::string message_text(std::string_view text, std::size_t max_bytes) {
  std::size_t cut = std::min(text.size(), max_bytes);
  while (cut < text.size() && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;  // not inside a UTF-8 sequence
  }
  std::string out;
  for (char c : text.substr(0, cut)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (cut < text.size()) out += "...";
  return out;
}

}  // namespace kvq
