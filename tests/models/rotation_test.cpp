// The offline hidden-dimension rotation (quant/rotation.h): R is orthogonal and block-diagonal as
// specified; a rotated float checkpoint of each pre-norm fixture family computes the same logits
// as the original (the proof that every reader, writer, norm and the head are folded right), and
// stops doing so when any one tensor is left unrotated; families that cannot be rotated are
// refused by name.
#include "quant/rotation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "models/model.h"
#include "models/rotation_support.h"
#include "quant/affine.h"
#include "quant/quantize_checkpoint.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& what) {
  return fs::temp_directory_path() / ("hearth_rotation_" + what + "_" + std::to_string(::getpid()));
}

// R as a dense matrix: the rows of I·R.
std::vector<float> rotation_matrix(const quant::HiddenRotation& r) {
  const int64_t n = r.size();
  std::vector<float> m(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) m[size_t(i * n + i)] = 1.0f;
  r.apply_rows(m.data(), n);
  return m;
}

TEST(Rotation, BlockSizes) {
  EXPECT_EQ(quant::rotation_block(64), 64);
  EXPECT_EQ(quant::rotation_block(4096), 4096);
  EXPECT_EQ(quant::rotation_block(384), 128);
  EXPECT_EQ(quant::rotation_block(5120), 1024);
  EXPECT_EQ(quant::rotation_block(320), 64);
  EXPECT_EQ(quant::rotation_block(96), 0);
  EXPECT_EQ(quant::rotation_block(100), 0);
  try {
    quant::HiddenRotation r(96, 1);
    ADD_FAILURE() << "96 has no block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden size 96"), std::string::npos) << e.what();
  }
}

TEST(Rotation, IsOrthogonalBlockDiagonalAndSeeded) {
  for (int64_t n : {64, 384, 512}) {
    SCOPED_TRACE(n);
    const quant::HiddenRotation rot(n, 7);
    const auto R = rotation_matrix(rot);
    const int64_t b = rot.block();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += double(R[size_t(i * n + k)]) * R[size_t(j * n + k)];
        ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
        // Every entry of a block is ±1/√b; outside the diagonal blocks, 0.
        const float want = i / b == j / b ? 1.0f / std::sqrt(float(b)) : 0.0f;
        ASSERT_NEAR(std::fabs(R[size_t(i * n + j)]), want, 1e-6) << i << "," << j;
      }
    // apply_transposed is Rᵀ·W.
    const int64_t cols = 5;
    std::vector<float> w(static_cast<size_t>(n * cols)), got = w;
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 0.37f);
    got = w;
    rot.apply_transposed(got.data(), cols);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        double want = 0;
        for (int64_t k = 0; k < n; ++k)
          want += double(R[size_t(k * n + i)]) * w[size_t(k * cols + c)];
        ASSERT_NEAR(got[size_t(i * cols + c)], want, 1e-4);
      }
  }
  // The seed picks the signs.
  EXPECT_NE(quant::HiddenRotation(64, 1).signs(), quant::HiddenRotation(64, 2).signs());
  EXPECT_EQ(quant::HiddenRotation(64, 3).signs(), quant::HiddenRotation(64, 3).signs());
}

// An F32 copy of a fixture, so the rotated checkpoint (written in its input's dtype) carries no
// bf16 rounding and the logits can be compared tightly.
void write_f32_copy(const fs::path& src, const fs::path& dst) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().extension() == ".json" && e.path().filename() != "model.safetensors.index.json")
      fs::copy_file(e.path(), dst / e.path().filename());
  const WeightStore store = WeightStore::open(src);
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<float>> data;
  for (const auto& name : store.names()) {
    const TensorInfo& t = *store.find(name);
    entries.push_back({name, DType::F32, t.shape});
    std::vector<float> v(t.nbytes / dtype_size(t.dtype));
    quant::affine_params_to_f32(static_cast<const uint8_t*>(t.data), t.dtype, int64_t(v.size()),
                                v.data());
    data.push_back(std::move(v));
  }
  SafetensorsWriter writer(dst, entries);
  for (size_t i = 0; i < entries.size(); ++i)
    writer.write(entries[i].name, data[i].data(), data[i].size() * 4);
  writer.finish();
}

void rotate(const fs::path& in, const fs::path& out, uint64_t seed = 5) {
  quant::QuantizeOptions o;
  o.spec.format = "none";
  o.spec.rotation = quant::RotationSpec{seed, rotation_norm_offset(in)};
  o.n_threads = 2;
  fs::remove_all(out);
  quant::quantize_checkpoint(in, out, o);
}

std::vector<float> all_logits(const fs::path& dir, const std::vector<int32_t>& prompt) {
  auto model = load_model(dir);
  std::vector<float> logits(prompt.size() * size_t(model->info().n_vocab));
  auto s = model->new_sequence();
  model->forward(*s, prompt, LogitsRows::All, logits.data());
  return logits;
}

// max |a - b| over max |a|.
double relative_error(const std::vector<float>& want, const std::vector<float>& got) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    err = std::max(err, double(std::fabs(want[i] - got[i])));
  }
  return err / scale;
}

// Rewrites `name` of checkpoint `dir` with the values `from` has for it.
void replace_tensor(const fs::path& dir, const fs::path& from, const std::string& name) {
  const fs::path tmp = dir.string() + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  {
    const WeightStore store = WeightStore::open(dir), other = WeightStore::open(from);
    std::vector<SafetensorsEntry> entries;
    for (const auto& n : store.names())
      entries.push_back({n, store.find(n)->dtype, store.find(n)->shape});
    SafetensorsWriter writer(tmp, entries);
    for (const auto& n : store.names()) {
      const TensorInfo* t = n == name ? other.find(n) : store.find(n);
      writer.write(n, t->data, t->nbytes);
    }
    writer.finish();
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json" && !fs::exists(tmp / e.path().filename()))
      fs::copy_file(e.path(), tmp / e.path().filename());
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

struct Case {
  std::string fixture;
  std::vector<std::string> must_matter;  // tensors whose rotation the logits must depend on
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture; }

class RotatedFixture : public ::testing::TestWithParam<Case> {};

TEST_P(RotatedFixture, GivesTheSameLogitsAndEveryTensorMatters) {
  const Case c = GetParam();
  std::vector<int32_t> prompt;
  for (const auto& fc : test::fixture_cases({}))
    if (fc.name == c.fixture) prompt = fc.reference["prompt"].get<std::vector<int32_t>>();
  ASSERT_FALSE(prompt.empty());
  const fs::path f32 = temp_dir(c.fixture + "_f32"), rotated = temp_dir(c.fixture + "_rot");
  write_f32_copy(test::fixture_root() + "/" + c.fixture, f32);
  rotate(f32, rotated);
  const auto config = nlohmann::json::parse(std::ifstream(rotated / "config.json"));
  ASSERT_TRUE(config.contains("rotation"));
  EXPECT_EQ(config["rotation"]["kind"], "sign_hadamard");
  EXPECT_EQ(config["rotation"]["block"], 64);
  EXPECT_EQ(config["rotation"]["seed"], 5);
  EXPECT_FALSE(config.contains("quantization"));

  const auto want = all_logits(f32, prompt);
  EXPECT_LT(relative_error(want, all_logits(rotated, prompt)), 1e-4);
  // Any tensor left as it was breaks the equality (10x the tolerance above at least; gemma's
  // fixture gains are near 0, so its (1 + w) norms barely differ from identity).
  for (const auto& name : c.must_matter) {
    SCOPED_TRACE(name);
    const fs::path broken = temp_dir(c.fixture + "_broken");
    fs::remove_all(broken);
    fs::copy(rotated, broken);
    replace_tensor(broken, f32, name);
    EXPECT_GT(relative_error(want, all_logits(broken, prompt)), 1e-3);
    fs::remove_all(broken);
  }
  fs::remove_all(f32);
  fs::remove_all(rotated);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RotatedFixture,
    ::testing::Values(
        Case{"llama",
             {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
              "model.layers.0.input_layernorm.weight", "model.layers.1.self_attn.v_proj.weight",
              "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.up_proj.weight",
              "model.layers.1.mlp.down_proj.weight",
              "model.layers.1.post_attention_layernorm.weight"}},
        Case{"llama_tied", {"model.embed_tokens.weight"}}, Case{"llama_bias", {}},
        Case{"phi3", {"model.layers.0.self_attn.qkv_proj.weight"}}, Case{"qwen3", {}},
        Case{"gemma", {"model.layers.0.input_layernorm.weight"}},
        Case{"qwen3_moe",
             {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.3.up_proj.weight"}},
        Case{"qwen3_5",
             {"model.language_model.layers.0.linear_attn.in_proj_z.weight",
              "model.language_model.layers.0.linear_attn.in_proj_b.weight",
              "model.language_model.layers.0.linear_attn.out_proj.weight",
              "model.language_model.layers.0.input_layernorm.weight",
              "model.language_model.norm.weight"}},
        Case{"qwen3_5_text", {}},
        Case{"qwen3_5_moe",
             {"model.language_model.layers.0.mlp.shared_expert_gate.weight",
              "model.language_model.layers.0.mlp.shared_expert.down_proj.weight",
              "model.language_model.layers.0.mlp.experts.1.down_proj.weight"}},
        Case{"qwen3_next",
             {"model.layers.0.linear_attn.in_proj_qkvz.weight",
              "model.layers.0.linear_attn.in_proj_ba.weight"}}));

TEST(Rotation, TiedHeadIsUntied) {
  const fs::path f32 = temp_dir("tied_f32"), rotated = temp_dir("tied_rot");
  write_f32_copy(test::fixture_root() + "/qwen3_5", f32);
  rotate(f32, rotated);
  const auto config = nlohmann::json::parse(std::ifstream(rotated / "config.json"));
  EXPECT_EQ(config["tie_word_embeddings"], false);
  const WeightStore store = WeightStore::open(rotated);
  EXPECT_TRUE(store.contains("lm_head.weight"));
  // The vision tower is copied, except the merger's last linear, which writes the residual.
  const WeightStore in = WeightStore::open(f32);
  const auto same = [&](const std::string& n) {
    return std::memcmp(in.find(n)->data, store.find(n)->data, in.find(n)->nbytes) == 0;
  };
  EXPECT_TRUE(same("model.visual.blocks.0.attn.qkv.weight"));
  EXPECT_FALSE(same("model.visual.merger.linear_fc2.weight"));
  fs::remove_all(f32);
  fs::remove_all(rotated);
}

TEST(Rotation, RefusesWhatItCannotFold) {
  for (const char* fixture : {"gemma2", "gemma3_text", "olmo2"}) {
    try {
      rotation_norm_offset(test::fixture_root() + "/" + fixture);
      ADD_FAILURE() << fixture;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("post-norms"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(rotation_norm_offset(test::fixture_root() + "/llama"), 0.0f);
  EXPECT_EQ(rotation_norm_offset(test::fixture_root() + "/qwen3_5"), 1.0f);
  EXPECT_EQ(rotation_norm_offset(test::fixture_root() + "/qwen3_5_text_mlx"), 0.0f);
  EXPECT_EQ(rotation_norm_offset(test::fixture_root() + "/qwen3_moe"), 0.0f);

  // A tensor in the text model of unknown role, and a rotated input.
  const fs::path f32 = temp_dir("unknown_f32"), out = temp_dir("unknown_out");
  write_f32_copy(test::fixture_root() + "/llama", f32);
  {
    const WeightStore store = WeightStore::open(f32);
    std::vector<SafetensorsEntry> entries;
    for (const auto& n : store.names())
      entries.push_back({n, store.find(n)->dtype, store.find(n)->shape});
    entries.push_back({"model.layers.0.mlp.mystery_proj.weight", DType::F32, {64, 64}});
    const fs::path tmp = temp_dir("unknown_tmp");
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    SafetensorsWriter writer(tmp, entries);
    std::vector<float> zeros(64 * 64, 0.0f);
    for (const auto& n : store.names()) writer.write(n, store.find(n)->data, store.find(n)->nbytes);
    writer.write("model.layers.0.mlp.mystery_proj.weight", zeros.data(), zeros.size() * 4);
    writer.finish();
    fs::copy_file(tmp / "model.safetensors", f32 / "model.safetensors",
                  fs::copy_options::overwrite_existing);
    fs::remove(f32 / "model.safetensors.index.json");
    fs::remove_all(tmp);
  }
  try {
    rotate(f32, out);
    ADD_FAILURE() << "rotated a checkpoint with an unknown tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.mystery_proj.weight"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(f32);
}

}  // namespace
}  // namespace hearth
