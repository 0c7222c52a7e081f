// One-token decode steps as one persistent kernel (Backend::decode_layers, decode_step.cu;
// CudaOptions::decode_step Always, by default only for layers of 24 MB or more) against the same
// steps as separate ops (Never). The transformers fixtures have heads of 16 and 32, below the
// kernel's 64 to 256, so random checkpoints of those head sizes are written to a temp dir: a llama
// (heads of 64, no q/k norm), a qwen3 (heads of 128, per-head q/k norm) and two Qwen3.5 hybrids
// (Gated DeltaNet layers between gated attention layers with partial rotary: heads of 256 with
// Gated DeltaNet heads of 128 × 128 as the 9B, and heads of 128 with 64 × 32 and three value heads
// per key head). Both forms must give the same logits up to accumulation order (the bf16 bound of
// the reference comparisons, 5e-2 of the logits' std) over decode steps that cross attention's
// 32-key chunks and the cache's growth, and the fused form must actually run; where a head's
// chunks are spread over blocks (heads of 256 past 64 keys, of 128 past 128;
// CudaOptions::decode_xattn) the same bits as a block per head. Skipped without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/qwen3_5.h"

namespace hearth {

// How many one-token steps the CUDA backends ran as one kernel (cuda_backend.cpp; test only).
int64_t cuda_decode_layers_taken();
int64_t cuda_decode_xattn_taken();

namespace {

namespace fs = std::filesystem;

struct Shape {
  std::string name, model_type;
  int hidden, intermediate, heads, kv_heads, head_dim, layers, vocab;
  bool qk_norm;
  // qwen3_5_text only: Gated DeltaNet heads and sizes, full attention every `interval` layers,
  // the rotated share of a head.
  int lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, interval = 0;
  float partial_rotary = 1.0f;
  bool hybrid() const { return model_type == "qwen3_5_text"; }
};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

// Writes config.json and a bf16 model.safetensors of random weights for `s` into dir.
void write_checkpoint(const fs::path& dir, const Shape& s, uint32_t seed) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  constexpr int kConvTaps = 4;
  nlohmann::json config = {
      {"architectures", {s.model_type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", s.model_type},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.intermediate},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"num_hidden_layers", s.layers},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", true},
      {"attention_bias", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "bfloat16"}};
  if (s.hybrid()) {
    config["architectures"] = {"Qwen3_5ForCausalLM"};
    config.erase("rope_theta");
    config["rope_parameters"] = {{"rope_type", "default"},
                                 {"rope_theta", 10000.0},
                                 {"partial_rotary_factor", s.partial_rotary}};
    config["linear_num_key_heads"] = s.lin_k_heads;
    config["linear_num_value_heads"] = s.lin_v_heads;
    config["linear_key_head_dim"] = s.lin_k_dim;
    config["linear_value_head_dim"] = s.lin_v_dim;
    config["linear_conv_kernel_dim"] = kConvTaps;
    config["full_attention_interval"] = s.interval;
  }
  std::ofstream(dir / "config.json") << config.dump(2);

  std::mt19937 rng(seed);
  std::map<std::string, std::pair<std::vector<int64_t>, std::string>> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float spread) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::uniform_real_distribution<float> u(-spread, spread);
    std::string bytes(size_t(n) * 2, '\0');
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = to_bf16(mean + u(rng));
      std::memcpy(bytes.data() + i * 2, &b, 2);
    }
    tensors[name] = {std::move(shape), std::move(bytes)};
  };
  const int64_t H = s.hidden, I = s.intermediate, hd = s.head_dim;
  const float w = 1.0f / std::sqrt(float(H));
  // Qwen3.5's gains are stored zero-centred (the model adds 1).
  const float gain = s.hybrid() ? 0.0f : 1.0f;
  add("model.embed_tokens.weight", {s.vocab, H}, 0.0f, 1.0f);
  add("model.norm.weight", {H}, gain, 0.1f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H}, gain, 0.1f);
    add(p + "post_attention_layernorm.weight", {H}, gain, 0.1f);
    add(p + "mlp.gate_proj.weight", {I, H}, 0.0f, w);
    add(p + "mlp.up_proj.weight", {I, H}, 0.0f, w);
    add(p + "mlp.down_proj.weight", {H, I}, 0.0f, 1.0f / std::sqrt(float(I)));
    if (s.hybrid() && (l + 1) % s.interval != 0) {  // a Gated DeltaNet layer
      const std::string a = p + "linear_attn.";
      const int64_t hv = s.lin_v_heads, vd = hv * s.lin_v_dim;
      const int64_t conv = 2 * int64_t(s.lin_k_heads) * s.lin_k_dim + vd;
      add(a + "in_proj_qkv.weight", {conv, H}, 0.0f, w);
      add(a + "in_proj_z.weight", {vd, H}, 0.0f, w);
      add(a + "in_proj_b.weight", {hv, H}, 0.0f, w);
      add(a + "in_proj_a.weight", {hv, H}, 0.0f, w);
      add(a + "conv1d.weight", {conv, 1, kConvTaps}, 0.0f, 0.5f);
      add(a + "A_log", {hv}, 1.0f, 1.0f);
      add(a + "dt_bias", {hv}, 0.0f, 0.5f);
      add(a + "norm.weight", {s.lin_v_dim}, 1.0f, 0.1f);
      add(a + "out_proj.weight", {H, vd}, 0.0f, 1.0f / std::sqrt(float(vd)));
      continue;
    }
    // Qwen3.5's q_proj holds each head's query and its output gate, one after the other.
    add(p + "self_attn.q_proj.weight", {(s.hybrid() ? 2 : 1) * s.heads * hd, H}, 0.0f, w);
    add(p + "self_attn.k_proj.weight", {s.kv_heads * hd, H}, 0.0f, w);
    add(p + "self_attn.v_proj.weight", {s.kv_heads * hd, H}, 0.0f, w);
    add(p + "self_attn.o_proj.weight", {H, s.heads * hd}, 0.0f,
        1.0f / std::sqrt(float(s.heads * hd)));
    if (s.qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd}, gain, 0.1f);
      add(p + "self_attn.k_norm.weight", {hd}, gain, 0.1f);
    }
  }
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", "BF16"},
                    {"shape", t.first},
                    {"data_offsets", {offset, offset + t.second.size()}}};
    offset += t.second.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h;
  for (const auto& [name, t] : tensors) out << t.second;
}

double std_of(const std::vector<float>& v) {
  double m = 0.0, q = 0.0;
  for (float x : v) m += x;
  m /= double(v.size());
  for (float x : v) q += (x - m) * (x - m);
  return std::sqrt(q / double(v.size()));
}

// load_model's work with a CUDA backend made with `options` (load_model takes no backend
// options): the architecture's factory and the GPU's default prefill chunk.
std::unique_ptr<Model> load_on_gpu(const fs::path& dir, const CudaOptions& options) {
  const ModelConfig config = ModelConfig::load(dir);
  const auto& hybrid_types = qwen3_5_model_types();
  const bool hybrid = std::find(hybrid_types.begin(), hybrid_types.end(), config.model_type()) !=
                      hybrid_types.end();
  auto backend = make_cuda_backend(0, options);
  auto model = hybrid ? make_qwen3_5_model(config, WeightStore::open(dir), std::move(backend))
                      : make_llama_model(config, WeightStore::open(dir), std::move(backend));
  model->set_default_prefill_chunk(2048);
  return model;
}

class CudaDecodeStep : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaDecodeStep, OneKernelEqualsSeparateOps) {
  const Shape& s = GetParam();
  const fs::path dir = fs::temp_directory_path() /
                       ("hearth_decode_step_" + s.name + "_" + std::to_string(::getpid()));
  write_checkpoint(dir, s, 1234);
  using Mode = CudaOptions::DecodeStep;
  // decode_blocks 0: one per SM; decode_xattn off: a block per head at every length (on: a
  // head's chunks over blocks when it has more than its block buffers, heads of 256 past 64
  // keys, of 128 past 128).
  auto load_with = [&](Mode mode, int blocks = 0, bool xattn = true) {
    CudaOptions options;
    options.decode_step = mode;
    options.decode_blocks = blocks;
    options.decode_xattn = xattn;
    return load_on_gpu(dir, options);
  };
  auto fused = load_with(Mode::Always);
  auto per_op = load_with(Mode::Never);
  // Three blocks for four heads: block 0 takes heads 0 and 3 in turn, as on a GPU with fewer
  // SMs than the model has heads. Each row and head is computed as on the full grid, so the
  // logits must be the same bits.
  auto fused_small = load_with(Mode::Always, 3);
  // A block per head at every length: the same chunks and the same combine as the
  // chunks over blocks, so the same bits, on the full grid and on 3 blocks (where the chunks'
  // warps without a buffer read the cache).
  const bool xattn = s.head_dim == 256 || s.head_dim == 128;
  auto per_head = load_with(Mode::Always, 0, false);
  auto per_head_small = load_with(Mode::Always, 3, false);
  {
    // By default (load_model, as the product loads) a model this small (layers of well under
    // 24 MB) keeps the per-op path.
    LoadOptions o;
    o.device = "cuda";
    auto by_size = load_model(dir, o);
    auto seq = by_size->new_sequence();
    std::vector<float> out(size_t(s.vocab));
    const int32_t prompt[] = {1, 2, 3};
    by_size->forward(*seq, prompt, LogitsRows::Last, out.data());
    const int64_t before = cuda_decode_layers_taken();
    const int32_t next = 4;
    by_size->forward(*seq, std::span<const int32_t>(&next, 1), LogitsRows::Last, out.data());
    EXPECT_EQ(cuda_decode_layers_taken(), before) << "small layers take the per-op path";
  }

  // Four sequences: one crosses attention's first 32-key chunks and the cache's growth, one
  // 64 keys and one 128 (a head's chunks over blocks from there, for heads of 256 and 128), the
  // last runs with 460–500 keys, split into the kernel's most chunks (kStepMaxChunks).
  const size_t V = size_t(s.vocab);
  for (const int prompt_len : {20, 50, 110, 460}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(int32_t((i * 37 + 11) % s.vocab));
    std::vector<float> a(V), b(V), c(V), d(V), e(V);
    auto sa = fused->new_sequence(), sb = per_op->new_sequence(), sc = fused_small->new_sequence();
    auto sd = per_head->new_sequence(), se = per_head_small->new_sequence();
    fused->forward(*sa, prompt, LogitsRows::Last, a.data());
    per_op->forward(*sb, prompt, LogitsRows::Last, b.data());
    fused_small->forward(*sc, prompt, LogitsRows::Last, c.data());
    per_head->forward(*sd, prompt, LogitsRows::Last, d.data());
    per_head_small->forward(*se, prompt, LogitsRows::Last, e.data());
    EXPECT_EQ(a, b) << "the prefill takes the same path in both";
    const int64_t before = cuda_decode_layers_taken(), xattn_before = cuda_decode_xattn_taken();
    constexpr int kSteps = 40;
    double worst = 0.0;
    for (int step = 0; step < kSteps; ++step) {
      const int32_t next = int32_t(std::max_element(b.begin(), b.end()) - b.begin());
      fused->forward(*sa, std::span<const int32_t>(&next, 1), LogitsRows::Last, a.data());
      per_op->forward(*sb, std::span<const int32_t>(&next, 1), LogitsRows::Last, b.data());
      fused_small->forward(*sc, std::span<const int32_t>(&next, 1), LogitsRows::Last, c.data());
      per_head->forward(*sd, std::span<const int32_t>(&next, 1), LogitsRows::Last, d.data());
      per_head_small->forward(*se, std::span<const int32_t>(&next, 1), LogitsRows::Last, e.data());
      EXPECT_EQ(a, c) << s.name << " prompt " << prompt_len << " step " << step
                      << ": the kernel on 3 blocks";
      EXPECT_EQ(a, d) << s.name << " prompt " << prompt_len << " step " << step
                      << ": a block per head";
      EXPECT_EQ(a, e) << s.name << " prompt " << prompt_len << " step " << step
                      << ": a block per head, 3 blocks";
      const double sd = std_of(b);
      double err = 0.0;
      for (size_t i = 0; i < V; ++i) err = std::max(err, double(std::fabs(a[i] - b[i])) / sd);
      EXPECT_LT(err, 5e-2) << s.name << " prompt " << prompt_len << " step " << step;
      worst = std::max(worst, err);
      // Each step feeds both models the same token (the per-op argmax), so an error cannot
      // compound through a different continuation; it can only through the caches (and the
      // hybrids' recurrent states).
    }
    EXPECT_EQ(cuda_decode_layers_taken() - before, 4 * kSteps) << "the one-kernel step ran";
    EXPECT_EQ(cuda_decode_xattn_taken() - xattn_before, xattn ? 2 * kSteps : 0)
        << "launched with chunks over blocks (heads of 128 and 256 only)";
    std::printf(
        "[ cuda     ] %-8s prompt %3d: one-kernel decode vs separate ops: max |diff| / std = "
        "%.2e\n",
        s.name.c_str(), prompt_len, worst);
  }
  fs::remove_all(dir);
}

Shape hybrid(std::string name, int head_dim, int kv_heads, int lin_k_heads, int lin_v_heads,
             int lin_k_dim, int lin_v_dim, int layers, int interval, float partial_rotary) {
  Shape s{name, "qwen3_5_text", 256, 512, 4, kv_heads, head_dim, layers, 512, true};
  s.lin_k_heads = lin_k_heads;
  s.lin_v_heads = lin_v_heads;
  s.lin_k_dim = lin_k_dim;
  s.lin_v_dim = lin_v_dim;
  s.interval = interval;
  s.partial_rotary = partial_rotary;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaDecodeStep,
    ::testing::Values(Shape{"llama", "llama", 256, 512, 4, 2, 64, 2, 512, false},
                      Shape{"qwen3", "qwen3", 256, 768, 4, 2, 128, 3, 512, true},
                      // The 9B's head sizes: layers linear, full, linear, full.
                      hybrid("qwen3_5", 256, 2, 2, 4, 128, 128, 4, 2, 0.25f),
                      // Heads of 128 with half of them (64 dims) rotated, three value heads
                      // per key head, slim Gated DeltaNet heads: linear, linear, full.
                      hybrid("qwen3_5_small", 128, 1, 2, 6, 64, 32, 3, 3, 0.5f)),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace hearth

#else
TEST(CudaDecodeStep, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
