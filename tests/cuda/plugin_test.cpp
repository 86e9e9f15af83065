// The built plugin file through the real registry: it loads, names itself, and its probe answers
// (unavailable with the reason on a machine without a usable GPU, available on the H200).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "kvq/core/registry.h"
#include "kvq/core/status.h"

namespace kvq {
namespace {

std::filesystem::path plugin_dir() {
  const char* build = std::getenv("KVQ_BUILD_DIR");
  if (build != nullptr) return std::filesystem::path(build) / "lib" / "kvq" / "plugins";
  return Registry::installed_plugin_dir();
}

TEST(CudaPlugin, LoadsAndProbes) {
  const std::filesystem::path file = plugin_dir() / "libkvq_cuda.so";
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  Registry registry;
  registry.scan({file});
  for (const auto& f : registry.failures()) ADD_FAILURE() << f.file << ": " << f.reason;
  const PluginInfo* info = nullptr;
  for (const auto& p : registry.plugins()) {
    if (p.name == "cuda") info = &p;
  }
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->formats, "nvfp4,fp8_e4m3,fp8_e5m2,bf16");
  EXPECT_EQ(info->layouts, "HND,NHD x linear,sm100_swizzled");
  EXPECT_FALSE(info->reason.empty());
  std::cout << "cuda: " << (info->available ? "available" : "unavailable") << ": " << info->reason
            << "\n";
  if (!info->available) {
    try {
      (void)registry.select("cuda");
      ADD_FAILURE() << "selecting an unavailable backend must throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unavailable);
      EXPECT_NE(std::string(e.what()).find(info->reason), std::string::npos) << e.what();
    }
  } else {
    const Backend b = registry.select("cuda");
    BackendOptions o;
    o.cache.num_blocks = 8;
    o.cache.num_kv_heads = 2;
    o.cache.head_size = 128;
    auto writer = b.make_writer(o);
    ASSERT_TRUE(writer);
    EXPECT_EQ(writer->device(), Device::cuda(0));
    EXPECT_EQ(writer->layout().page_bytes(), 2u * 2 * 16 * (64 + 8));
    // The per-element formats: a writer and a reader each ([K data | V data], no scales).
    for (const auto& [format, bytes] :
         {std::pair{"fp8_e4m3", 128u}, std::pair{"fp8_e5m2", 128u}, std::pair{"bf16", 256u}}) {
      BackendOptions e = o;
      e.cache.format = format;
      e.cache.layout.k_scales.clear();  // no scale region to arrange
      e.cache.layout.v_scales.clear();
      auto w = b.make_writer(e);
      ASSERT_TRUE(w) << format;
      EXPECT_EQ(w->layout().page_bytes(), 2u * 2 * 16 * bytes) << format;
      EXPECT_TRUE(b.make_reader(e)) << format;
    }
  }
}

}  // namespace
}  // namespace kvq
