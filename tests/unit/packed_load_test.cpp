// WeightStore::take of trellis-coded modules (axis 1 and the transposed axis 0): the logical
// shape, the codes and scales it points at, the decoded values, and errors naming the module
// when the stored shapes disagree with the quantization.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <vector>

#include "backend/cpu/packed_matmul.h"
#include "core/error.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "quant/trellis.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

struct Module {
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales;
  std::vector<int64_t> codes_shape, scales_shape;
};

// A random trellis module of logical [out, in]; stored rows are out (axis 1) or in (axis 0).
Module make_module(int64_t out, int64_t in, int k, int axis) {
  std::mt19937 rng(uint32_t(out + in + k + axis));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = axis == 1 ? out : in, cols = axis == 1 ? in : out;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = normal(rng);
  Module m;
  m.codes.resize(static_cast<size_t>(rows * cols * k / 32));
  m.scales.resize(static_cast<size_t>(rows));
  quant::quantize_trellis_rows(w.data(), rows, cols, k, m.codes.data(), m.scales.data(), nullptr);
  m.codes_shape = {rows, cols * k / 32};
  m.scales_shape = {rows};
  return m;
}

fs::path write_checkpoint(const std::string& tag, const Module& a, const Module& b) {
  const fs::path dir =
      fs::temp_directory_path() / ("hearth_trellis_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<SafetensorsEntry> entries = {{"up.weight", DType::U32, a.codes_shape},
                                           {"up.scales", DType::F16, a.scales_shape},
                                           {"down.weight", DType::U32, b.codes_shape},
                                           {"down.scales", DType::F16, b.scales_shape}};
  SafetensorsWriter writer(dir, entries);
  writer.write("up.weight", a.codes.data(), a.codes.size() * 4);
  writer.write("up.scales", a.scales.data(), a.scales.size() * 2);
  writer.write("down.weight", b.codes.data(), b.codes.size() * 4);
  writer.write("down.scales", b.scales.data(), b.scales.size() * 2);
  writer.finish();
  return dir;
}

nlohmann::json trellis_entry(int k, int axis) {
  return {{"mode", "trellis"},
          {"bits", k},
          {"group_size", 256},
          {"trellis", {{"L", 12}, {"code", "1mad"}, {"axis", axis}}}};
}

TEST(PackedLoad, TrellisModulesBothAxes) {
  const Module up = make_module(48, 512, 3, 1), down = make_module(256, 48, 2, 0);
  const fs::path dir = write_checkpoint("ok", up, down);
  WeightStore store = WeightStore::open(dir);
  nlohmann::json config = {
      {"quantization", {{"up", trellis_entry(3, 1)}, {"down", trellis_entry(2, 0)}}}};
  store.set_quantization(QuantizationConfig::from_json(config, "config.json"));
  const Tensor u = store.take("up.weight", {48, 512});
  const Tensor d = store.take("down.weight", {256, 48});
  store.audit();  // codes and scales both taken
  EXPECT_EQ(u.describe(), "[48, 512] trellis 3-bit");
  EXPECT_EQ(d.describe(), "[256, 48] trellis 2-bit (transposed)");
  EXPECT_EQ(store.taken_params(), 48 * 512 + 256 * 48);

  // Row r of the logical matrix decodes to the reference decoder's values.
  std::vector<float> want(48 * 512), got(512);
  quant::dequantize_trellis_rows(up.codes.data(), up.scales.data(), 48, 512, 3, want.data());
  cpu::packed_dequantize_rows(u, 7, 8, got.data());
  for (int i = 0; i < 512; ++i) ASSERT_EQ(got[size_t(i)], want[size_t(7 * 512 + i)]);
  std::vector<float> wt(48 * 256), row(48);
  quant::dequantize_trellis_rows(down.codes.data(), down.scales.data(), 48, 256, 2, wt.data());
  cpu::packed_dequantize_rows(d, 100, 101, row.data());
  for (int i = 0; i < 48; ++i) ASSERT_EQ(row[size_t(i)], wt[size_t(i * 256 + 100)]);
  fs::remove_all(dir);
}

TEST(PackedLoad, TrellisShapeErrorsNameTheModule) {
  const Module up = make_module(48, 512, 3, 1), down = make_module(256, 48, 2, 0);
  const fs::path dir = write_checkpoint("err", up, down);
  auto take_with = [&](const nlohmann::json& quant, const std::string& name,
                       std::vector<int64_t> shape) {
    try {
      WeightStore store = WeightStore::open(dir);
      store.set_quantization(QuantizationConfig::from_json({{"quantization", quant}}, "c.json"));
      store.take(name, std::move(shape));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // The codes are 3-bit: a config saying 4 disagrees with their shape.
  EXPECT_NE(take_with({{"up", trellis_entry(4, 1)}}, "up.weight", {48, 512}).find("4-bit trellis"),
            std::string::npos);
  // An input size that is not a multiple of the block.
  EXPECT_NE(take_with({{"up", trellis_entry(3, 1)}}, "up.weight", {48, 500}).find("up"),
            std::string::npos);
  EXPECT_NE(take_with({{"down", trellis_entry(2, 0)}}, "down.weight", {200, 48}).find("multiple"),
            std::string::npos);
  nlohmann::json bad_code = trellis_entry(3, 1);
  bad_code["trellis"]["code"] = "3inst";
  EXPECT_NE(take_with({{"up", bad_code}}, "up.weight", {48, 512}).find("\"3inst\""),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hearth
