// `kvq layout` run as a user runs it: the binary (KVQ_BINARY, set by CMake) on the shipped SM100
// config and on test configs; exact lines on stdout, exit statuses and one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

struct KvqRun {
  int status = -1;
  std::string output;  // stdout and stderr together
};

std::string source_dir() {
  const char* d = std::getenv("KVQ_SOURCE_DIR");
  return d ? d : KVQ_SOURCE_DIR_DEFAULT;
}

KvqRun kvq(const std::string& args) {
  const std::string cmd = std::string("'") + KVQ_BINARY + "' " + args + " 2>&1";
  KvqRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int w = pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

std::string sm100() {
  return source_dir() + "/configs/nvfp4_sm100.yaml";
}
std::string data(const std::string& name) {
  return source_dir() + "/tests/layouts/data/" + name;
}

TEST(CmdLayout, PrintsGeometryRegionsAndLocatesKGroup) {
  const KvqRun r = kvq("layout " + sm100() + " --locate k,5,0,3");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line : {
           "  page_bytes    18432\n",
           "  cache bytes   18874368 (18.0 MiB)\n",
           "  per token     1152 bytes (K + V, all heads) vs 4096 in bf16: 3.56x smaller, 4.50 "
           "bits per element\n",
           "  K data           0        8192  HND\n",
           "  K scales      8192        1024  HND linear\n",
           "  V data        9216        8192  HND\n",
           "  V scales     17408        1024  HND sm100_swizzled\n",
           "locate K token 5, head 0, group 3 (elements 48..63 of the head row)\n",
           "  data   page offset 344..351  (K data + 344)\n",
           "  scale  page offset 8235  (K scales + 43; (t', s') = (5, 3) in the head's [16, 8] "
           "tile, linear)\n",
       }) {
    EXPECT_NE(r.output.find(line), std::string::npos) << "missing: " << line << "in:\n" << r.output;
  }
}

TEST(CmdLayout, LocatesTheSwizzledVScaleOfTheFormatDoc) {
  // S 8, T 16, token 5, group 3 -> (t', s') = (5, 5), tile offset 45.
  const KvqRun r = kvq("layout " + sm100() + " --locate v,5,0,3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("  data   page offset 9560..9567  (V data + 344)\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  scale  page offset 17453  (V scales + 45; (t', s') = (5, 5) in the "
                          "head's [16, 8] tile, sm100_swizzled)\n"),
            std::string::npos)
      << r.output;
}

// A byte that starts a region is labeled with that region, not with the one ending before it:
// K data 0..8191, K scales 8192..9215, V data 9216..17407, V scales 17408..18431.
TEST(CmdLayout, FirstBytesOfARegionAreLabeledWithIt) {
  KvqRun r = kvq("layout " + sm100() + " --locate k,0,0,0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("  data   page offset 0..7  (K data + 0)\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  scale  page offset 8192  (K scales + 0; "), std::string::npos)
      << r.output;
  r = kvq("layout " + sm100() + " --locate v,0,0,0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("  data   page offset 9216..9223  (V data + 0)\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  scale  page offset 17408  (V scales + 0; "), std::string::npos)
      << r.output;
}

TEST(CmdLayout, NhdBothSwizzled) {
  const KvqRun r = kvq("layout " + data("nhd_h2_d256.yaml") + " --locate v,5,1,13");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("  V scales      4352         256  NHD sm100_swizzled\n"),
            std::string::npos)
      << r.output;
  // NHD row (t'=7)*H + h = 15, (t', s') = (4 + 13/4, (13%4)*4 + 5%4) = (7, 5): 15*16 + 5 = 245
  EXPECT_NE(r.output.find("  scale  page offset 4597  (V scales + 245; (t', s') = (7, 5)"),
            std::string::npos)
      << r.output;
}

TEST(CmdLayout, BadLocateValuesAreUsageErrorsNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"k,16,0,3", "kvq: --locate: TOKEN 16 out of range: expected 0 <= TOKEN < 16 (block_size)\n"},
      {"k,0,8,3", "kvq: --locate: HEAD 8 out of range: expected 0 <= HEAD < 8 (num_kv_heads)\n"},
      {"k,0,0,-1",
       "kvq: --locate: GROUP -1 out of range: expected 0 <= GROUP < 8 (head_size / 16)\n"},
      {"q,1,0,3", "kvq: --locate: SIDE must be k or v, found 'q'\n"},
      {"k,1,x,3", "kvq: --locate: HEAD must be an integer, found 'x'\n"},
      {"k,1", "kvq: --locate: expected SIDE,TOKEN,HEAD,GROUP (e.g. k,5,0,3), found 'k,1'\n"},
  };
  for (const auto& [arg, message] : cases) {
    const KvqRun r = kvq("layout " + sm100() + " --locate " + arg);
    EXPECT_EQ(r.status, 2) << arg;
    EXPECT_EQ(r.output, message) << arg;
  }
}

TEST(CmdLayout, RefusedGeometryPointsAtTheConfigLine) {
  const std::string file = data("swizzled_head_size_80.yaml");
  const KvqRun r = kvq("layout " + file);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "kvq: " + file +
                          ":8:14: cache.head_size: V scales sm100_swizzled need head_size % 64 == "
                          "0 (groups = head_size/16 a multiple of 4); found head_size 80\n");
}

// --svg naming the config would replace the YAML with the picture: refused, the config kept.
TEST(CmdLayout, SvgOverTheConfigIsRefused) {
  const std::string config = std::string(::testing::TempDir()) + "kvq_layout_test_config.yaml";
  std::filesystem::copy_file(sm100(), config, std::filesystem::copy_options::overwrite_existing);
  const KvqRun r = kvq("layout " + config + " --svg " + config);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "kvq: --svg " + config + ": is the CONFIG file: expected a different file\n");
  const KvqRun check = kvq("check " + config);
  EXPECT_EQ(check.status, 0) << check.output;
  std::remove(config.c_str());
}

TEST(CmdLayout, SvgDrawsRegionsHeadsAndTheSwizzle) {
  const std::string out = std::string(::testing::TempDir()) + "kvq_layout_test_page.svg";
  std::remove(out.c_str());
  const KvqRun r = kvq("layout " + sm100() + " --svg " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string svg = ss.str();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  for (const char* s : {">K data (HND)<", ">V scales (HND sm100_swizzled)<", ">h7<",
                        ">offset 17408, 1024 bytes<", ">t5 g3<"}) {
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  }
  // The first V scale word of head 0 is t0..t3 of group 0, in that order (the swizzle).
  const size_t v = svg.find(">V scales (HND sm100_swizzled), bytes 17408..17471 of the page<");
  ASSERT_NE(v, std::string::npos);
  size_t at = v;
  for (const char* cell : {">t0 g0<", ">t1 g0<", ">t2 g0<", ">t3 g0<", ">t0 g1<"}) {
    const size_t next = svg.find(cell, at);
    ASSERT_NE(next, std::string::npos) << cell;
    EXPECT_EQ(svg.find("<text", at + 1), svg.rfind("<text", next)) << cell << " not next";
    at = next;
  }
  std::remove(out.c_str());
}

// --locate with --svg: the picture marks the target's data bytes and scale byte (red outlines in
// the bar and in the zoom, which shows the target's head) and names the offsets --locate prints.
TEST(CmdLayout, SvgMarksTheLocateTarget) {
  const std::string out = std::string(::testing::TempDir()) + "kvq_layout_test_locate.svg";
  const auto read = [&] {
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::remove(out.c_str());
  const KvqRun plain = kvq("layout " + sm100() + " --svg " + out);
  ASSERT_EQ(plain.status, 0) << plain.output;
  const std::string without = read();
  EXPECT_EQ(without.find("#d62728"), std::string::npos);

  const KvqRun r = kvq("layout " + sm100() + " --locate v,13,2,3 --svg " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  // V data 9216 + head 2 x 16 tokens x 64 + token 13 x 64 + group 3 x 8 = 12120; V scales 17408 +
  // head 2 x 128 + (13/4)*4*8 + 4*3 + 13%4 = 17773.
  EXPECT_NE(r.output.find("  data   page offset 12120..12127  (V data + 2904)\n"),
            std::string::npos)
      << r.output;
  const std::string svg = read();
  EXPECT_NE(svg.find(">Target (red): V token 13, head 2, group 3: data bytes 12120..12127 (V data "
                     "+ 2904), scale byte 17773 (V scales + 365)<"),
            std::string::npos);
  EXPECT_NE(svg.find(">Zoom: head 2's scale bytes for tokens 8..15, in address order<"),
            std::string::npos);
  size_t marks = 0;
  for (size_t at = svg.find("stroke=\"#d62728\""); at != std::string::npos;
       at = svg.find("stroke=\"#d62728\"", at + 1)) {
    ++marks;
  }
  EXPECT_EQ(marks, 3u) << "data bytes and scale byte in the V bar, the scale cell in the zoom";
  EXPECT_NE(svg, without);
  std::remove(out.c_str());
}

// The largest geometries a config may give draw a picture of bounded size, quickly: lines
// closer than 2 px are left out and the zoom looks only at heads near the one it draws (pages are
// below 2^32 bytes: 16 tokens x 8192 heads x head_size 8192 is the largest square of heads).
TEST(CmdLayout, SvgOfTheLargestGeometriesStaysSmall) {
  const std::string dir = ::testing::TempDir();
  for (const auto& [name, geometry] : std::vector<std::pair<std::string, std::string>>{
           {"heads", "  block_size: 16\n  num_kv_heads: 8192\n  head_size: 8192\n"},
           {"tokens",
            "  block_size: 1048576\n  num_kv_heads: 1\n  head_size: 64\n  layout: {order: NHD}\n"},
       }) {
    const std::string config = dir + "kvq_layout_big_" + name + ".yaml";
    const std::string out = dir + "kvq_layout_big_" + name + ".svg";
    std::ofstream(config) << "cache:\n  format: nvfp4\n  num_blocks: 1\n" << geometry;
    const KvqRun r = kvq("layout " + config + " --svg " + out);
    ASSERT_EQ(r.status, 0) << r.output;
    std::ifstream f(out, std::ios::ate);
    EXPECT_LT(static_cast<int64_t>(f.tellg()), 1 << 20) << name;
    std::remove(out.c_str());
    std::remove(config.c_str());
  }
}

}  // namespace
