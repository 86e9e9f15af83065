// The out-of-tree example (examples/custom_backend): built with clang against the installed kvq
// by plugin_example_backend_install (which also proves it saw kvq::abi alone), loaded here from
// its install folder and selected by name like any backend. The format has one definition, so its
// caches must equal reference_cpu's byte for byte: through the registry for every layout, both
// input dtypes and strided inputs, and through the installed `kvq write --backend example_nvfp4`.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kvq/abi/plugin.h"
#include "kvq/core/logging.h"
#include "kvq/core/registry.h"
#include "kvq/io/safetensors.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;

const fs::path kWorkDir = KVQ_EXAMPLE_WORK_DIR;
const fs::path kExampleDir = kWorkDir / "plugin-prefix" / "lib" / "kvq" / "plugins";
const fs::path kExampleFile = kExampleDir / "libkvq_example_nvfp4.so";

// num_blocks 3 x block_size 16, H 2, D 64 (sm100_swizzled needs D % 64 == 0).
constexpr int64_t kBlocks = 3, kBlockSize = 16, kHeads = 2, kHeadSize = 64, kTokens = 20;
constexpr uint8_t kUntouched = 0x5A;

BackendOptions options(const std::string& order, const std::string& k_scales,
                       const std::string& v_scales) {
  BackendOptions o;
  o.cache.num_blocks = kBlocks;
  o.cache.block_size = kBlockSize;
  o.cache.num_kv_heads = kHeads;
  o.cache.head_size = kHeadSize;
  o.cache.layout = {order, k_scales, v_scales};
  o.device = Device::cpu();
  o.threads = 1;
  return o;
}

uint16_t to_bf16(float f) {  // round to nearest even; no NaN here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// kTokens x kHeads x kHeadSize values, each written `spread` elements apart (spread 2: a view
// with strides [H*D*2, D*2, 2] over every other element), as f32 or bf16 bytes.
struct Rows {
  std::vector<uint8_t> bytes;
  TensorView view;
};

Rows make_rows(DType dtype, int64_t spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = kTokens * kHeads * kHeadSize, esize = dtype_size(dtype);
  Rows r;
  r.bytes.assign(static_cast<size_t>(n * spread * esize), 0xEE);
  for (int64_t i = 0; i < n; ++i) {
    // Magnitudes from 1e-3 to 1e3 so groups get different scale bytes; a few exact zeros.
    float x = normal(rng) * std::pow(10.0f, static_cast<float>(i % 7) - 3.0f);
    if (i % 97 == 0) x = 0.0f;
    uint8_t* at = r.bytes.data() + i * spread * esize;
    if (dtype == DType::f32) {
      std::memcpy(at, &x, 4);
    } else {
      const uint16_t h = to_bf16(x);
      std::memcpy(at, &h, 2);
    }
  }
  r.view = make_view(r.bytes.data(), dtype, {kTokens, kHeads, kHeadSize});
  for (size_t d = 0; d < 3; ++d) r.view.strides[d] *= spread;
  return r;
}

// Tokens on pages in no particular order, every fifth one padding (-1).
std::vector<int64_t> slots_for_tokens() {
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < kTokens; ++t) slots.push_back(t % 5 == 4 ? -1 : (t * 7 + 3) % 48);
  return slots;
}

class ExampleBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_regular_file(kExampleFile))
        << kExampleFile << " is missing: plugin_example_backend_install installs it";
    registry_.scan({kExampleDir, KVQ_BUILD_PLUGIN_DIR});
    for (const auto& f : registry_.failures()) ADD_FAILURE() << f.file << ": " << f.reason;
  }
  Backend example() const { return registry_.select("example_nvfp4"); }
  Backend reference() const { return registry_.select("reference_cpu"); }

  Registry registry_;
};

TEST_F(ExampleBackend, IsListedWithWhatItDeclares) {
  const PluginInfo& info = example().info();
  EXPECT_EQ(info.file, kExampleFile);
  EXPECT_EQ(info.version, "1.0.0");
  EXPECT_TRUE(info.available);
  EXPECT_EQ(info.score, 1);
  EXPECT_EQ(info.reason, "single-threaded CPU example");
  EXPECT_EQ(info.formats, "nvfp4");
  EXPECT_EQ(info.layouts, "HND,NHD x linear,sm100_swizzled");
  EXPECT_EQ(info.input_dtypes, "bf16,f32");
}

struct WriteCase {
  const char* order;
  const char* k_scales;
  const char* v_scales;
  DType dtype;
  DType slot_dtype;
  int64_t spread;  // 1: contiguous rows; 2: every other element (head_size stride 2)
};

TEST_F(ExampleBackend, WritesReferenceCpusBytesForEveryLayoutDtypeAndStride) {
  const WriteCase cases[] = {
      {"HND", "linear", "sm100_swizzled", DType::bf16, DType::i64, 1},
      {"HND", "sm100_swizzled", "linear", DType::f32, DType::i32, 2},
      {"NHD", "linear", "linear", DType::f32, DType::i64, 1},
      {"NHD", "sm100_swizzled", "sm100_swizzled", DType::bf16, DType::i32, 2},
  };
  for (const WriteCase& c : cases) {
    SCOPED_TRACE(std::string(c.order) + " " + c.k_scales + "/" + c.v_scales + " " +
                 std::string(dtype_name(c.dtype)) + " slots " +
                 std::string(dtype_name(c.slot_dtype)) + " spread " + std::to_string(c.spread));
    const BackendOptions o = options(c.order, c.k_scales, c.v_scales);
    auto ours = example().make_writer(o);
    auto theirs = reference().make_writer(o);
    const int64_t page = static_cast<int64_t>(ours->layout().page_bytes());
    ASSERT_EQ(page, static_cast<int64_t>(theirs->layout().page_bytes()));

    Rows key = make_rows(c.dtype, c.spread, 1), value = make_rows(c.dtype, c.spread, 2);
    const std::vector<int64_t> slots64 = slots_for_tokens();
    std::vector<int32_t> slots32(slots64.begin(), slots64.end());
    std::vector<uint8_t> cache_ours(static_cast<size_t>(kBlocks * page), kUntouched);
    std::vector<uint8_t> cache_theirs = cache_ours;

    WriteArgs a;
    a.key = key.view;
    a.value = value.view;
    a.slot_mapping = c.slot_dtype == DType::i64
                         ? make_view(const_cast<int64_t*>(slots64.data()), DType::i64, {kTokens})
                         : make_view(slots32.data(), DType::i32, {kTokens});
    a.k_scale = 0.5f;
    a.v_scale = 3.0f;
    a.cache = make_view(cache_ours.data(), DType::u8, {kBlocks, page});
    Status s = ours->write(a);
    ASSERT_TRUE(s.is_ok()) << s.message();
    a.cache = make_view(cache_theirs.data(), DType::u8, {kBlocks, page});
    s = theirs->write(a);
    ASSERT_TRUE(s.is_ok()) << s.message();

    ASSERT_NE(cache_ours, std::vector<uint8_t>(cache_ours.size(), kUntouched)) << "wrote nothing";
    ASSERT_TRUE(cache_ours == cache_theirs) << "the example's cache differs from reference_cpu's";
  }
}

TEST_F(ExampleBackend, ReadsWhatReferenceCpuReads) {
  const BackendOptions o = options("NHD", "linear", "sm100_swizzled");
  auto writer = reference().make_writer(o);
  const int64_t page = static_cast<int64_t>(writer->layout().page_bytes());
  Rows key = make_rows(DType::f32, 1, 3), value = make_rows(DType::f32, 1, 4);
  std::vector<int64_t> slots = slots_for_tokens();
  std::vector<uint8_t> cache(static_cast<size_t>(kBlocks * page), 0);
  WriteArgs w;
  w.key = key.view;
  w.value = value.view;
  w.slot_mapping = make_view(slots.data(), DType::i64, {kTokens});
  w.cache = make_view(cache.data(), DType::u8, {kBlocks, page});
  w.k_scale = 0.25f;
  w.v_scale = 2.0f;
  ASSERT_TRUE(writer->write(w).is_ok());

  const size_t n = static_cast<size_t>(kTokens * kHeads * kHeadSize);
  std::vector<float> out[2][2];  // [backend][key, value]
  for (int b = 0; b < 2; ++b) {
    auto reader = (b == 0 ? example() : reference()).make_reader(o);
    out[b][0].assign(n, 7.0f);
    out[b][1].assign(n, 7.0f);
    ReadArgs r;
    r.cache = w.cache;
    r.slot_mapping = w.slot_mapping;
    r.key = make_view(out[b][0].data(), DType::f32, {kTokens, kHeads, kHeadSize});
    r.value = make_view(out[b][1].data(), DType::f32, {kTokens, kHeads, kHeadSize});
    r.k_scale = w.k_scale;
    r.v_scale = w.v_scale;
    const Status s = reader->read(r);
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  for (int side = 0; side < 2; ++side) {
    EXPECT_EQ(std::memcmp(out[0][side].data(), out[1][side].data(), n * sizeof(float)), 0)
        << (side == 0 ? "key" : "value") << ": the example reads other values than reference_cpu";
  }
  EXPECT_EQ(out[0][0][4 * kHeads * kHeadSize], 0.0f) << "token 4 is padding: zeros";
}

// The host checks the contract and the example's declared requirements before the call crosses:
// the same refusal in the same words as for any backend, and nothing written.
TEST_F(ExampleBackend, HostRefusesWhatTheExampleDidNotDeclare) {
  auto writer = example().make_writer(options("HND", "linear", "sm100_swizzled"));
  const int64_t page = static_cast<int64_t>(writer->layout().page_bytes());
  Rows key = make_rows(DType::f32, 1, 5), value = make_rows(DType::f32, 1, 6);
  key.view.dtype = value.view.dtype = DType::f16;  // the bytes of half as many f16 rows: enough
  std::vector<int64_t> slots = slots_for_tokens();
  std::vector<uint8_t> cache(static_cast<size_t>(kBlocks * page), kUntouched);
  const std::vector<uint8_t> untouched = cache;
  WriteArgs a;
  a.key = key.view;
  a.value = value.view;
  a.slot_mapping = make_view(slots.data(), DType::i64, {kTokens});
  a.cache = make_view(cache.data(), DType::u8, {kBlocks, page});
  Status s = writer->write(a);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "key: dtype f16: expected bf16 or f32 (example_nvfp4's input dtypes)");

  a.key.dtype = a.value.dtype = DType::f32;
  slots[3] = kBlocks * kBlockSize;
  s = writer->write(a);
  EXPECT_EQ(s.code(), ErrorCode::out_of_range);
  EXPECT_EQ(s.message().rfind("slot_mapping[3] = 48: expected < 48", 0), 0u) << s.message();
  EXPECT_TRUE(cache == untouched) << "a refused write changed the cache";

  int64_t count = -1;
  ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
  EXPECT_EQ(count, 0);
}

// The example's own refusals: a device it does not run on (through the host), and a page format
// it does not write. The host's PageLayout knows nvfp4 alone today, so the second is asked of the
// plugin's C entry directly, with a descriptor page.h builds, as a future host would send it.
TEST_F(ExampleBackend, RefusesOtherDevicesAndFormats) {
  BackendOptions o = options("HND", "linear", "linear");
  o.device = Device::cuda(0);
  try {
    (void)example().make_writer(o);
    ADD_FAILURE() << "make_writer on cuda:0 succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_EQ(e.key(), "device");
    EXPECT_NE(std::string(e.what()).find("device cuda:0: example_nvfp4 runs on the cpu only"),
              std::string::npos)
        << e.what();
  }

  (void)example();  // loaded (and init called) by the registry: dlopen finds the same library
  void* library = dlopen(kExampleFile.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr) << dlerror();
  const auto entry = reinterpret_cast<kvq_plugin_entry_fn>(dlsym(library, KVQ_PLUGIN_ENTRY_NAME));
  ASSERT_NE(entry, nullptr);
  const kvq_plugin* plugin = entry();
  kvq_page_desc fp8{};
  int32_t bad_side = 0;
  ASSERT_EQ(kvq_page_desc_init(&fp8, KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, KVQ_SCALES_NONE,
                               KVQ_SCALES_NONE, kBlocks, kBlockSize, kHeads, kHeadSize, &bad_side),
            KVQ_PAGE_OK);
  const kvq_backend_options c{sizeof(kvq_backend_options), &fp8, 0, {kDLCPU, 0}, 1};
  for (int reader = 0; reader < 2; ++reader) {
    SCOPED_TRACE(reader ? "create_reader" : "create_writer");
    kvq_error err{};
    kvq_writer* w = nullptr;
    kvq_reader* r = nullptr;
    const int32_t code =
        reader ? plugin->create_reader(&c, &r, &err) : plugin->create_writer(&c, &w, &err);
    EXPECT_EQ(code, KVQ_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(w, nullptr);
    EXPECT_EQ(r, nullptr);
    ASSERT_NE(err.message, nullptr);
    EXPECT_STREQ(err.message, "cache.format fp8_e4m3: example_nvfp4 writes nvfp4 pages only");
    ASSERT_NE(err.key, nullptr);
    EXPECT_STREQ(err.key, "cache.format");
  }
  dlclose(library);  // drops this reference only: the registry's stays (plugins are never unloaded)
}

// The example logs through the host's callback (kvq::abi::log), so its line reaches kvq's logger
// with the host's level and format.
TEST_F(ExampleBackend, LogsThroughTheHost) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  auto& log = logger();
  const auto level = log.level();
  log.sinks().push_back(sink);
  log.set_level(spdlog::level::debug);
  auto writer = example().make_writer(options("HND", "linear", "sm100_swizzled"));
  log.set_level(spdlog::level::info);
  (void)example().make_writer(options("HND", "linear", "sm100_swizzled"));  // below the level
  log.sinks().pop_back();
  log.set_level(level);
  const std::string want = "example_nvfp4: writer for 3 pages of " +
                           std::to_string(writer->layout().page_bytes()) + " bytes";
  const std::string text = lines.str();
  const size_t first = text.find(want);
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(want, first + 1), std::string::npos) << "logged below the level:\n" << text;
}

// ---- the installed `kvq write` -----------------------------------------------------------------

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The installed kvq, as a user runs it: its own reference_cpu beside libkvq_core, the example
// through KVQ_PLUGIN_PATH (LD_LIBRARY_PATH unset: the GPU scripts point it at the build's lib/).
int run_installed_kvq(const std::string& args, const fs::path& dir) {
  const std::string cmd = "env -u LD_LIBRARY_PATH KVQ_PLUGIN_PATH=" + kExampleDir.string() + " " +
                          (kWorkDir / "kvq-prefix" / "bin" / "kvq").string() + " " + args + " >" +
                          (dir / "stdout").string() + " 2>" + (dir / "stderr").string();
  const int raw = std::system(cmd.c_str());
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

TEST_F(ExampleBackend, InstalledKvqWriteWithTheExampleEqualsReferenceCpu) {
  const fs::path dir = kWorkDir / "kvq-write";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // [T, H, D] bf16 rows, i64 slots with padding, for configs/-style NHD with swizzled scales.
  Rows key = make_rows(DType::bf16, 1, 7), value = make_rows(DType::bf16, 1, 8);
  std::vector<int64_t> slots = slots_for_tokens();
  save_safetensors(dir / "in.safetensors",
                   {{"key", key.view},
                    {"value", value.view},
                    {"slot_mapping", make_view(slots.data(), DType::i64, {kTokens})}});
  std::ofstream(dir / "config.yaml") << R"(backend: reference_cpu
device: cpu
cache:
  format: nvfp4
  num_blocks: 3
  block_size: 16
  num_kv_heads: 2
  head_size: 64
  layout: { order: NHD, k_scales: sm100_swizzled, v_scales: linear }
  k_scale: 0.75
  v_scale: 1.5
log: { level: warn }
)";
  for (const char* backend : {"example_nvfp4", "reference_cpu"}) {
    const std::string args = "write " + (dir / "config.yaml").string() + " --input " +
                             (dir / "in.safetensors").string() + " --output " +
                             (dir / (std::string(backend) + ".safetensors")).string() +
                             " --backend " + backend;
    ASSERT_EQ(run_installed_kvq(args, dir), 0) << "kvq " << args << "\n" << slurp(dir / "stderr");
    EXPECT_NE(slurp(dir / "stdout").find(std::string("with ") + backend), std::string::npos)
        << slurp(dir / "stdout");
  }
  const std::string ours = slurp(dir / "example_nvfp4.safetensors");
  const std::string theirs = slurp(dir / "reference_cpu.safetensors");
  ASSERT_FALSE(ours.empty());
  EXPECT_TRUE(ours == theirs) << "kvq write --backend example_nvfp4 wrote another file than "
                                 "reference_cpu (the same layout metadata, so the same bytes)";
  const SafetensorsFile cache = SafetensorsFile::load(dir / "example_nvfp4.safetensors");
  const std::span<const uint8_t> kv = cache.at("kv_cache").bytes;
  EXPECT_NE(std::count(kv.begin(), kv.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(kv.size()))
      << "an all-zero cache";
}

}  // namespace
}  // namespace kvq
