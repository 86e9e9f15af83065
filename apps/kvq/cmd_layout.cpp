// kvq layout CONFIG [--svg FILE] [--locate SIDE,TOKEN,HEAD,GROUP]: the page layout the config
// describes -- geometry, page and cache sizes, the region table; --locate prints where one
// group's data bytes and scale byte live; --svg draws one page (layouts/page_svg.h).
#include <fmt/format.h>

#include <charconv>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "kvq/core/status.h"
#include "kvq/io/file_io.h"
#include "kvq/layouts/page_svg.h"

namespace kvq::app {
namespace {

struct Locate {
  Side side = Side::k;
  int64_t token = 0, head = 0, group = 0;
};

[[noreturn]] void bad_locate(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, "--locate: " + message);
}

// "k,5,0,3" -> Locate, each field checked against the layout's geometry.
Locate parse_locate(const std::string& text, const PageLayout& layout) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1) {
    fields.push_back(text.substr(start, comma - start));
  }
  fields.push_back(text.substr(start));
  if (fields.size() != 4) {
    bad_locate(fmt::format("expected SIDE,TOKEN,HEAD,GROUP (e.g. k,5,0,3), found '{}'", text));
  }
  Locate loc;
  if (fields[0] == "k" || fields[0] == "K") {
    loc.side = Side::k;
  } else if (fields[0] == "v" || fields[0] == "V") {
    loc.side = Side::v;
  } else {
    bad_locate(fmt::format("SIDE must be k or v, found '{}'", fields[0]));
  }
  const PageGeometry& g = layout.geometry();
  struct Field {
    const char* name;
    int64_t* out;
    int64_t bound;
    const char* bound_name;
  };
  const Field spec[3] = {{"TOKEN", &loc.token, g.block_size, "block_size"},
                         {"HEAD", &loc.head, g.num_kv_heads, "num_kv_heads"},
                         {"GROUP", &loc.group, layout.groups(), "head_size / 16"}};
  for (int i = 0; i < 3; ++i) {
    const std::string& f = fields[i + 1];
    int64_t v = 0;
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (ec != std::errc() || end != f.data() + f.size() || f.empty()) {
      bad_locate(fmt::format("{} must be an integer, found '{}'", spec[i].name, f));
    }
    if (v < 0 || v >= spec[i].bound) {
      bad_locate(fmt::format("{} {} out of range: expected 0 <= {} < {} ({})", spec[i].name, v,
                             spec[i].name, spec[i].bound, spec[i].bound_name));
    }
    *spec[i].out = v;
  }
  return loc;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

void print_layout(const std::string& file, const PageLayout& layout, std::ostream& out) {
  const PageGeometry& g = layout.geometry();
  const auto meta = layout.metadata();
  const uint64_t page = layout.page_bytes();
  const uint64_t per_token = page / static_cast<uint64_t>(g.block_size);
  const auto bf16_per_token = static_cast<uint64_t>(2 * g.num_kv_heads * g.head_size * 2);
  out << fmt::format("{}: {} page layout\n", file, layout.format());
  out << fmt::format(
      "  geometry      num_blocks {}, block_size {} tokens, num_kv_heads {}, head_size {} ({})\n",
      g.num_blocks, g.block_size, g.num_kv_heads, g.head_size,
      layout.has_scales()
          ? fmt::format("{} groups of {}", layout.groups(), layout.group_size())
          : fmt::format("{} bits per element, no scales", layout.descriptor().elem_bits));
  out << fmt::format("  layout        order {}, k_scales {}, v_scales {}\n", meta.at("order"),
                     meta.at("k_scales"), meta.at("v_scales"));
  out << fmt::format("  page_bytes    {}\n", page);
  out << fmt::format("  cache bytes   {} ({})\n", layout.cache_bytes(),
                     human_bytes(layout.cache_bytes()));
  out << fmt::format(
      "  per token     {} bytes (K + V, all heads) vs {} in bf16: {:.2f}x smaller, "
      "{:.2f} bits per element\n",
      per_token, bf16_per_token,
      static_cast<double>(bf16_per_token) / static_cast<double>(per_token),
      static_cast<double>(8 * per_token) / static_cast<double>(2 * g.num_kv_heads * g.head_size));
  out << "\n  region      offset       bytes  arrangement\n";
  for (const Region& r : layout.regions()) {
    out << fmt::format("  {:<10} {:>7} {:>11}  {}\n", r.name, r.offset, r.bytes, r.arrangement);
  }
}

const Region& region_containing(const std::vector<Region>& regions, uint64_t offset) {
  for (const Region& r : regions) {
    if (offset >= r.offset && offset < r.offset + r.bytes) return r;
  }
  throw Error(ErrorCode::internal, fmt::format("offset {} lies in no region", offset));
}

void print_locate(const Locate& loc, const PageLayout& layout, std::ostream& out) {
  const char* side = loc.side == Side::k ? "K" : "V";
  const uint64_t data = layout.data_offset(loc.side, loc.token, loc.head, loc.group);
  const auto regions = layout.regions();
  const Region& dr = region_containing(regions, data);
  const int64_t first = loc.group * layout.group_size();
  out << fmt::format("\nlocate {} token {}, head {}, group {} (elements {}..{} of the head row)\n",
                     side, loc.token, loc.head, loc.group, first, first + layout.group_size() - 1);
  out << fmt::format("  data   page offset {}..{}  ({} + {})\n", data,
                     data + static_cast<uint64_t>(layout.data_bytes_per_group()) - 1, dr.name,
                     data - dr.offset);
  if (!layout.has_scales()) {
    out << fmt::format("  scale  none ({} pages have no scale region)\n", layout.format());
    out << fmt::format("  in the cache, block b: add b * {} (page_bytes)\n", layout.page_bytes());
    return;
  }
  const uint64_t scale = layout.scale_offset(loc.side, loc.token, loc.head, loc.group);
  const Region& sr = region_containing(regions, scale);
  std::string where;
  {
    // Where the byte sits in the head's [T, S] scale tile: undo the head's share of the side's
    // affine map (kvq/abi/page.h); what is left is t' rows of scale_t4 bytes plus s'.
    const kvq_page_desc& d = layout.descriptor();
    const kvq_side_map& m = d.side[static_cast<int>(loc.side)];
    const uint64_t rel =
        scale - m.scale_base - static_cast<uint64_t>(loc.head) * static_cast<uint64_t>(m.scale_h);
    where = fmt::format("; (t', s') = ({}, {}) in the head's [{}, {}] tile, {}", rel / m.scale_t4,
                        rel % m.scale_t4, d.block_size, d.groups,
                        kvq_scale_arrangement_name(d.scales[static_cast<int>(loc.side)]));
  }
  out << fmt::format("  scale  page offset {}  ({} + {}{})\n", scale, sr.name, scale - sr.offset,
                     where);
  out << fmt::format("  in the cache, block b: add b * {} (page_bytes)\n", layout.page_bytes());
}

}  // namespace

void add_layout_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("layout", "Print a config's page layout; locate a group; draw it");
  auto config = std::make_shared<std::string>();
  auto svg = std::make_shared<std::string>();
  auto locate = std::make_shared<std::string>();
  sub->add_option("CONFIG", *config, "YAML config")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--svg", *svg, "Write one page as an SVG picture to FILE")
      ->check(kNonEmpty)
      ->type_name("FILE");
  sub->add_option("--locate", *locate,
                  "Print the data and scale byte offsets of SIDE,TOKEN,HEAD,GROUP (e.g. k,5,0,3)")
      ->check(kNonEmpty)
      ->type_name("SIDE,TOKEN,HEAD,GROUP");
  auto common = add_common_flags(*sub);
  sub->callback([&run, config, svg, locate, common] {
    run = [config, svg, locate, common] {
      auto checked = load_checked_config(*config);
      apply_logging(checked.config, *common);
      const auto layout = std::move(checked.layout);
      if (!svg->empty()) {
        check_distinct(*svg, "--svg", *config, "CONFIG");
        check_writable(*svg, "--svg");
      }
      // Parse --locate before printing anything so a bad value is a clean usage error.
      std::unique_ptr<Locate> loc;
      if (!locate->empty()) loc = std::make_unique<Locate>(parse_locate(*locate, *layout));
      print_layout(*config, *layout, std::cout);
      if (loc) print_locate(*loc, *layout, std::cout);
      if (!svg->empty()) {
        write_file_atomically(*svg, loc ? page_svg(*layout, PageSvgTarget{loc->side, loc->token,
                                                                          loc->head, loc->group})
                                        : page_svg(*layout));
        std::cout << "\nwrote " << *svg << "\n";
      }
      return kExitOk;
    };
  });
}

}  // namespace kvq::app
