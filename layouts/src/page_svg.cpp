// page_svg(): see page_svg.h. Plain SVG 1.1 text, no external fonts or scripts.
#include "kvq/layouts/page_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kvq/core/status.h"

namespace kvq {
namespace {

constexpr double kWidth = 1200, kMargin = 20;
constexpr uint64_t kZoomCells = 256;  // scale bytes drawn per side in the zoom
constexpr const char* kRegionFill[4] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759"};
constexpr const char* kTarget = "#d62728";
constexpr const char* kTokenFill[8] = {"#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb",
                                       "#fcbba1", "#d9f0a3", "#fee391", "#d0d1e6"};

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Svg {
  std::string body;
  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& extra = "") {
    body +=
        fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" {}/>)",
                    x, y, w, h, fill, extra) +
        "\n";
  }
  void text(double x, double y, const std::string& s, double size = 12,
            const std::string& extra = "") {
    body += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" {}>{}</text>)", x, y, size,
                        extra, esc(s)) +
            "\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double w) {
    body +=
        fmt::format(
            R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="{}"/>)",
            x1, y1, x2, y2, stroke, w) +
        "\n";
  }
};

std::string get(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "?" : it->second;
}

// The target's bytes in the page: data [data, data + data_bytes), one scale byte.
struct TargetBytes {
  PageSvgTarget where;
  uint64_t data = 0, data_bytes = 0, scale = 0;
};

// Section 1: one bar per side, regions to scale, heads (HND) or tokens (NHD) marked.
double draw_sides(Svg& svg, const PageLayout& layout, const std::vector<Region>& regions, bool hnd,
                  double y, const std::optional<TargetBytes>& target) {
  const PageGeometry& g = layout.geometry();
  const double bar_w = kWidth - 2 * kMargin - 60;
  const size_t per_side = regions.size() / 2;  // data (+ scales where the format has them)
  const uint64_t side_bytes = regions[per_side].offset;  // K side = [0, V data)
  const double px_per_byte = bar_w / static_cast<double>(side_bytes);
  const int64_t units = hnd ? g.num_kv_heads : g.block_size;
  const char* unit = hnd ? "h" : "t";
  svg.text(kMargin, y, "The page to scale, one bar per side (offsets in bytes from the page start)",
           15, R"(font-weight="bold")");
  y += 14;
  svg.text(kMargin, y + 4,
           hnd ? "HND: each region holds the heads one after another (h0, h1, ...); inside a head, "
                 "its tokens in order"
               : "NHD: each region holds the tokens one after another (t0, t1, ...); inside a "
                 "token, all heads in order",
           12, R"(fill="#555")");
  y += 18;
  for (int side = 0; side < 2; ++side) {
    const Region& data = regions[per_side * static_cast<size_t>(side)];
    const double x0 = kMargin + 60;
    svg.text(kMargin, y + 36, side == 0 ? "K side" : "V side", 14, R"(font-weight="bold")");
    for (size_t r = 0; r < per_side; ++r) {
      const Region& reg = regions[per_side * static_cast<size_t>(side) + r];
      const double x = x0 + static_cast<double>(reg.offset - data.offset) * px_per_byte;
      const double w = static_cast<double>(reg.bytes) * px_per_byte;
      svg.rect(x, y + 16, w, 34, kRegionFill[2 * static_cast<size_t>(side) + r],
               R"(stroke="#222" stroke-width="1")");
      // heads / tokens inside the region, where they are at least 2 px apart (a geometry of
      // 65536 heads would otherwise draw 65536 lines no eye can tell apart)
      const double uw = w / static_cast<double>(units);
      for (int64_t u = 1; u < units && uw >= 2; ++u) {
        svg.line(x + uw * static_cast<double>(u), y + 16, x + uw * static_cast<double>(u), y + 50,
                 "#ffffff", uw > 6 ? 1.0 : 0.4);
      }
      if (uw >= 22) {
        for (int64_t u = 0; u < units; ++u) {
          svg.text(x + uw * static_cast<double>(u) + 3, y + 37, fmt::format("{}{}", unit, u), 11,
                   R"(fill="#fff")");
        }
      }
      // the data region's labels start at its left edge, the scales' end at their right edge
      const double tx = r == 0 ? x + 2 : x + w - 2;
      const char* anchor = r == 0 ? R"(text-anchor="start")" : R"(text-anchor="end")";
      svg.text(tx, y + 12, fmt::format("{} ({})", reg.name, reg.arrangement), 11, anchor);
      svg.text(tx, y + 64, fmt::format("offset {}, {} bytes", reg.offset, reg.bytes), 11,
               std::string(anchor) + R"( fill="#333")");
    }
    if (target && static_cast<int>(target->where.side) == side) {
      // At least 3 px wide so a byte of a large page stays visible.
      const auto mark = [&](uint64_t offset, uint64_t bytes) {
        const double x = x0 + static_cast<double>(offset - data.offset) * px_per_byte;
        const double w = std::max(3.0, static_cast<double>(bytes) * px_per_byte);
        svg.rect(x - (w > 3.0 ? 0.0 : 1.0), y + 13, w, 40, "none",
                 fmt::format(R"(stroke="{}" stroke-width="2")", kTarget));
      };
      mark(target->data, target->data_bytes);
      if (layout.has_scales()) mark(target->scale, 1);
    }
    y += 84;
  }
  return y;
}

// Section 2: one head's scale tile per side, bytes in address order, for tokens t0..t0+7.
double draw_zoom(Svg& svg, const PageLayout& layout, const std::vector<Region>& regions,
                 int64_t head, double y, const std::optional<TargetBytes>& target) {
  const PageGeometry& g = layout.geometry();
  const int64_t S = layout.groups();
  const int64_t tokens = std::min<int64_t>(8, g.block_size);
  // The 8 tokens around the target, starting on a multiple of 4 (a swizzled word's tokens).
  int64_t t0 = 0;
  if (target) t0 = std::min(target->where.token / 8 * 8, (g.block_size - tokens) / 4 * 4);
  svg.text(kMargin, y,
           fmt::format("Zoom: head {}'s scale bytes for tokens {}..{}, in address order", head, t0,
                       t0 + tokens - 1),
           15, R"(font-weight="bold")");
  y += 18;
  svg.text(kMargin, y,
           "each cell is one E4M3 scale byte, labelled with the (token t, group g) stored there; "
           "colour = token; thick outline = one 32-bit word",
           12, R"(fill="#555")");
  y += 12;
  const double col_w = (kWidth - 2 * kMargin - 20) / 2;
  const int64_t cols = std::clamp<int64_t>(S, 4, 16);
  const double cell_w = std::min(64.0, (col_w - 10) / static_cast<double>(cols));
  const double cell_h = 26;
  double bottom = y;
  for (int side = 0; side < 2; ++side) {
    const Region& reg = regions[2 * side + 1];
    // owner of each byte: (t, h, g) of the first `tokens` tokens, all heads
    struct Who {
      int64_t t, h, g;
    };
    std::map<uint64_t, Who> who;
    uint64_t first = UINT64_MAX, last = 0;
    for (int64_t t = t0; t < t0 + tokens; ++t) {
      for (int64_t s = 0; s < S; ++s) {
        const uint64_t off = layout.scale_offset(static_cast<Side>(side), t, head, s);
        first = std::min(first, off);
        last = std::max(last, off);
      }
    }
    first -= (first - reg.offset) % 4;  // start on a 32-bit word of the region
    const uint64_t count = std::min<uint64_t>(last - first + 1, kZoomCells);
    // The other heads' bytes among the drawn cells. Every arrangement keeps a head's S groups of
    // one token within a few words, so only heads within kZoomCells / S (+2) of `head` can land in
    // the window: the loop stays small for any geometry.
    const int64_t reach = static_cast<int64_t>(kZoomCells) / S + 2;
    for (int64_t t = t0; t < t0 + tokens; ++t) {
      for (int64_t h = std::max<int64_t>(0, head - reach);
           h <= std::min<int64_t>(g.num_kv_heads - 1, head + reach); ++h) {
        for (int64_t s = 0; s < S; ++s) {
          const uint64_t off = layout.scale_offset(static_cast<Side>(side), t, h, s);
          if (off >= first && off < first + count) who[off] = {t, h, s};
        }
      }
    }
    const double x0 = kMargin + static_cast<double>(side) * (col_w + 20);
    double yy = y + 22;
    svg.text(x0, yy,
             fmt::format("{} ({}), bytes {}..{} of the page", reg.name, reg.arrangement, first,
                         first + count - 1),
             13, R"(font-weight="bold")");
    yy += 8;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t off = first + i;
      const double cx = x0 + static_cast<double>(i % static_cast<uint64_t>(cols)) * cell_w;
      const double cy = yy + static_cast<double>(i / static_cast<uint64_t>(cols)) * cell_h;
      auto it = who.find(off);
      std::string fill = "#eeeeee", label;
      if (it != who.end() && it->second.h == head) {
        fill = kTokenFill[it->second.t % 8];
        label = fmt::format("t{} g{}", it->second.t, it->second.g);
      } else if (it != who.end()) {
        label = fmt::format("h{}", it->second.h);
      }
      svg.rect(cx, cy, cell_w, cell_h, fill, R"(stroke="#999" stroke-width="0.5")");
      svg.text(cx + 3, cy + 17, label, cell_w >= 44 ? 11 : 9);
      if ((off - reg.offset) % 4 == 0) {  // outline the 32-bit word starting here
        const double ww = cell_w * 4;
        svg.rect(cx, cy, std::min(ww, x0 + cell_w * static_cast<double>(cols) - cx), cell_h, "none",
                 R"(stroke="#000" stroke-width="1.6")");
      }
      if (target && static_cast<int>(target->where.side) == side && off == target->scale) {
        svg.rect(cx + 1.5, cy + 1.5, cell_w - 3, cell_h - 3, "none",
                 fmt::format(R"(stroke="{}" stroke-width="3")", kTarget));
      }
    }
    const auto rows = (count + static_cast<uint64_t>(cols) - 1) / static_cast<uint64_t>(cols);
    bottom = std::max(bottom, yy + static_cast<double>(rows) * cell_h);
  }
  return bottom + 20;
}

std::string draw_page(const PageLayout& layout, int64_t zoom_head,
                      const std::optional<TargetBytes>& target) {
  const PageGeometry& g = layout.geometry();
  if (zoom_head < 0 || zoom_head >= g.num_kv_heads) {
    throw Error(ErrorCode::out_of_range,
                fmt::format("head {} out of range: expected 0 <= head < {} (num_kv_heads)",
                            zoom_head, g.num_kv_heads));
  }
  const auto regions = layout.regions();
  const auto meta = layout.metadata();
  const bool scaled = layout.has_scales();
  if (regions.size() != (scaled ? 4u : 2u)) {
    throw Error(ErrorCode::internal, fmt::format("page_svg: a {} page of {} regions: expected {}",
                                                 layout.format(), regions.size(), scaled ? 4 : 2));
  }
  const bool hnd = get(meta, "order") == "HND";
  const int64_t row_bytes = g.head_size * layout.descriptor().elem_bits / 8;
  Svg svg;
  double y = 30;
  svg.text(
      kMargin, y,
      fmt::format(
          "{} page: {} bytes   (block_size {} tokens, {} KV heads x head_size {}{})",
          layout.format(), layout.page_bytes(), g.block_size, g.num_kv_heads, g.head_size,
          scaled ? fmt::format(", {} groups of {}", layout.groups(), layout.group_size()) : ""),
      18, R"(font-weight="bold")");
  y += 22;
  svg.text(kMargin, y,
           scaled ? fmt::format("order {}, K scales {}, V scales {};  page = [K data | K scales | "
                                "V data | V scales];  a head row = {} data bytes + {} scale bytes",
                                get(meta, "order"), get(meta, "k_scales"), get(meta, "v_scales"),
                                row_bytes, layout.groups())
                  : fmt::format("order {};  page = [K data | V data];  a head row = {} bytes, "
                                "no scales",
                                get(meta, "order"), row_bytes),
           13);
  y += 34;
  if (target) {
    const PageSvgTarget& w = target->where;
    const char* side = w.side == Side::k ? "K" : "V";
    const size_t per_side = regions.size() / 2;
    const Region& data = regions[w.side == Side::k ? 0 : per_side];
    std::string scale_text = "no scale byte";
    if (scaled) {
      const Region& scales = regions[w.side == Side::k ? 1 : 3];
      scale_text = fmt::format("scale byte {} ({} + {})", target->scale, scales.name,
                               target->scale - scales.offset);
    }
    svg.text(kMargin, y - 8,
             fmt::format("Target (red): {} token {}, head {}, {}: data bytes {}..{} ({} + {}), {}",
                         side, w.token, w.head,
                         scaled ? fmt::format("group {}", w.group)
                                : fmt::format("elements {}..{}", w.group * layout.group_size(),
                                              (w.group + 1) * layout.group_size() - 1),
                         target->data, target->data + target->data_bytes - 1, data.name,
                         target->data - data.offset, scale_text),
             13, fmt::format(R"(fill="{}" font-weight="bold")", kTarget));
    y += 16;
  }
  y = draw_sides(svg, layout, regions, hnd, y, target);
  y += 10;
  if (scaled) {  // the scale tiles: what the arrangements are about
    y = draw_zoom(svg, layout, regions, zoom_head, y, target);
    svg.text(kMargin, y,
             "linear: scale (t, g) at t*S + g of the head's [T, S] tile.   sm100_swizzled: at "
             "(t/4)*4*S + 4*g + t%4 -- the 4 tokens' scales of one group form one 32-bit word.",
             12, R"(fill="#333")");
    y += 20;
  }
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" )"
                     R"(viewBox="0 0 {:.0f} {:.0f}" font-family="DejaVu Sans, Arial, sans-serif">)"
                     "\n"
                     R"(<rect width="100%" height="100%" fill="#ffffff"/>)"
                     "\n{}</svg>\n",
                     kWidth, y, kWidth, y, svg.body);
}

}  // namespace

std::string page_svg(const PageLayout& layout, int64_t zoom_head) {
  return draw_page(layout, zoom_head, std::nullopt);
}

std::string page_svg(const PageLayout& layout, const PageSvgTarget& target) {
  const PageGeometry& g = layout.geometry();
  if (target.token < 0 || target.token >= g.block_size || target.head < 0 ||
      target.head >= g.num_kv_heads || target.group < 0 || target.group >= layout.groups()) {
    throw Error(ErrorCode::out_of_range,
                fmt::format("target token {}, head {}, group {} out of range: expected token < {} "
                            "(block_size), head < {} (num_kv_heads), group < {}",
                            target.token, target.head, target.group, g.block_size, g.num_kv_heads,
                            layout.groups()));
  }
  TargetBytes t;
  t.where = target;
  t.data = layout.data_offset(target.side, target.token, target.head, target.group);
  t.data_bytes = static_cast<uint64_t>(layout.data_bytes_per_group());
  if (layout.has_scales()) {
    t.scale = layout.scale_offset(target.side, target.token, target.head, target.group);
  }
  return draw_page(layout, target.head, t);
}

}  // namespace kvq
