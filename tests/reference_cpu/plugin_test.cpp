// The reference_cpu plugin as the host sees it: found by the registry in lib/kvq/plugins, probe
// available with score 10, and its writer and reader are the static library's (same bytes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "kvq/core/registry.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "reference_test_util.h"

namespace kvq {
namespace {

std::filesystem::path plugin_dir() {
  const char* build = std::getenv("KVQ_BUILD_DIR");
  return build ? std::filesystem::path(build) / "lib" / "kvq" / "plugins"
               : Registry::installed_plugin_dir();
}

TEST(ReferenceCpuPlugin, IsFoundAvailableWithScore10) {
  Registry registry;
  registry.scan({plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  const PluginInfo& info = backend.info();
  EXPECT_EQ(info.name, "reference_cpu");
  EXPECT_TRUE(info.available) << info.reason;
  EXPECT_EQ(info.score, 10);
  EXPECT_EQ(info.formats, "nvfp4,fp8_e4m3,fp8_e5m2,bf16");
  EXPECT_EQ(info.layouts, "HND,NHD x linear,sm100_swizzled");
  EXPECT_NE(info.reason.find("host memory"), std::string::npos) << info.reason;
}

TEST(ReferenceCpuPlugin, WritesAndReadsLikeTheStaticLibrary) {
  Registry registry;
  registry.scan({plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  const BackendOptions options = test::options_for(8, 16, 2, 64);
  const auto writer = backend.make_writer(options);
  const auto reader = backend.make_reader(options);
  ASSERT_TRUE(writer && reader);
  EXPECT_EQ(writer->device(), Device::cpu());
  const int64_t page = static_cast<int64_t>(writer->layout().page_bytes());

  constexpr int64_t T = 50;
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss;
  std::vector<float> key(T * 2 * 64), value(key.size());
  for (auto& x : key) x = gauss(rng);
  for (auto& x : value) x = gauss(rng);
  std::vector<int64_t> slots(T);
  for (int64_t i = 0; i < T; ++i) slots[i] = (i * 37) % 128;
  std::vector<uint8_t> from_plugin(8 * page), from_static(8 * page);
  WriteArgs a;
  a.key = make_view(key.data(), DType::f32, {T, 2, 64});
  a.value = make_view(value.data(), DType::f32, {T, 2, 64});
  a.slot_mapping = make_view(slots.data(), DType::i64, {T});
  a.cache = make_view(from_plugin.data(), DType::u8, {8, page});
  ASSERT_TRUE(writer->write(a).is_ok());
  reference_cpu::ReferenceWriter local(options);
  a.cache = make_view(from_static.data(), DType::u8, {8, page});
  ASSERT_TRUE(local.write(a).is_ok());
  EXPECT_TRUE(from_plugin == from_static);

  std::vector<float> k(key.size()), v(value.size());
  ReadArgs r;
  r.cache = make_view(from_plugin.data(), DType::u8, {8, page});
  r.slot_mapping = a.slot_mapping;
  r.key = make_view(k.data(), DType::f32, {T, 2, 64});
  r.value = make_view(v.data(), DType::f32, {T, 2, 64});
  ASSERT_TRUE(reader->read(r).is_ok());
  EXPECT_LT(test::rel_l2(key, k), 0.12);
  EXPECT_LT(test::rel_l2(value, v), 0.12);

  // A bad write through the plugin boundary arrives as a Status with the message intact.
  slots[3] = 128;
  const Status s = writer->write(a);
  EXPECT_EQ(s.code(), ErrorCode::out_of_range);
  EXPECT_EQ(s.message(),
            "slot_mapping[3] = 128: expected < 128 (num_blocks 8 x block_size 16; negative slots "
            "are padding)");
}

}  // namespace
}  // namespace kvq
