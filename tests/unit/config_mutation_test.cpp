// Hostile config.json mutations over every fixture checkpoint (tests/data/models/*/): each field
// of the text config (numbers, booleans, strings, arrays, nested rope parameters) is replaced by
// hostile values, arrays are cut, grown and blown up, and fields the architectures read are added
// with bad values. Each mutated checkpoint is written to a temp dir and loaded: it must either
// load (and then run a few tokens) or fail with a hearth::Error — never crash, never throw
// std::bad_alloc or any other exception type. Built with HEARTH_SANITIZE, AddressSanitizer also
// catches the out-of-bounds accesses that would not crash.
// Each field is first set to an object and to a string: a field that loads with both is not read
// for that model, and its other values are skipped; a fixture of a model_type already mutated
// only has the fields that differ from the earlier one mutated (else it would take minutes).
// It cannot pass vacuously: every fixture must load unmutated, and the number of fixtures and of
// mutations tried, refused and loaded are all checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "loader/weight_store.h"
#include "loader_test_util.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Stands for a token that is not JSON (NaN), beyond a double (1e999) or nested too deep for a
// recursive walk; replaced in the dumped text.
const std::string kRaw = "__hearth_raw_token__";

// The first two values of every list: a field that loads with both is never read for this
// model, so the rest of its values are skipped (it cannot matter what it holds).
const std::vector<json> kProbes = {json::object(), "x"};

// Hostile values for a field, by the kind of its own value: numbers get the edges of the ranges
// the loader checks (0, -1, either side of int32's largest, int64's largest, a double beyond
// float, a fraction; the probes cover the wrong types), other kinds numbers, a boolean and an
// empty list.
std::vector<json> values_for(const json& original) {
  std::vector<json> v = kProbes;
  if (original.is_number())
    v.insert(v.end(), {json(0), json(-1), json(INT32_MAX), json(int64_t(1) << 31), json(INT64_MAX),
                       json(1e300), json(1.5)});
  else
    v.insert(v.end(), {json(3), json(true), json::array()});
  return v;
}

// Tokens that fail at the parse whatever field holds them: tried once per fixture.
std::vector<std::string> parse_level_tokens() {
  // Past any depth limit: copies, merges and messages recurse over a document.
  return {"NaN", "-Infinity", "1e999", std::string(100000, '[') + std::string(100000, ']')};
}

// Values for an entry of an array (layer_types[i], mlp_only_layers[i], ...).
std::vector<json> element_values() {
  return {json(-1), json(int64_t(1) << 31), json("x"), json(nullptr)};
}

json huge_array(const json& like) {
  return json(std::vector<json>(20000, like.empty() ? json(0) : like.front()));
}

// Fields the architectures read that fixtures may lack, each with hostile values; added to (or
// replacing) the text config's own.
std::vector<std::pair<std::string, std::vector<json>>> added_fields() {
  const std::vector<json> factors = {1.5, 0, -1, 1e-9, 1e300, 2, "x", nullptr};
  const std::vector<json> counts = {0, -1, 1, 2, int64_t(1) << 31, INT64_MAX, 1.5, "4"};
  // Rope parameter objects: the v5 rope_parameters gets them all, the v4 rope_scaling (read the
  // same way, from another place) a few.
  const std::vector<json> ropes = {
      {{"type", "linear"}, {"factor", 0}},
      {{"type", "linear"}, {"factor", 1e300}},
      {{"type", "linear"}, {"factor", "x"}},
      {{"type", 3}},
      "linear",
      nullptr,
      {{"rope_type", "longrope"}, {"factor", 2}},
      {{"rope_type", "dynamic"}, {"factor", 1e-300}},
      {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1}},
      {{"rope_type", "llama3"}, {"factor", 8}, {"original_max_position_embeddings", 0}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 0}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 2.5}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", 0}, {"beta_slow", -1}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"attention_factor", -1}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"mscale", 1e300}, {"mscale_all_dim", 1}},
      {{"rope_type", "yarn"}, {"factor", 4}, {"truncate", "x"}},
      {{"rope_type", "yarn"}, {"factor", 1e-300}, {"original_max_position_embeddings", 1}},
      {{"rope_type", "default"}, {"partial_rotary_factor", 1.5}},
      {{"rope_type", "default"}, {"rope_theta", 0}},
      {{"full_attention", 5}},
      {{"full_attention", {{"rope_type", "linear"}, {"factor", -2}}},
       {"sliding_attention", {{"rope_theta", 0}}}}};
  return {
      {"partial_rotary_factor", factors},
      {"rope_scaling", std::vector<json>(ropes.begin(), ropes.begin() + 6)},
      {"rope_parameters", ropes},
      {"rope_theta", {0, -1, 1e300, "x"}},
      {"rope_local_base_freq", {0, -1, 1e300, "x", nullptr}},
      {"sliding_window", counts},
      {"use_sliding_window", {true, "yes", 1}},
      {"max_window_layers", counts},
      {"sliding_window_pattern", counts},
      {"no_rope_layer_interval", counts},
      {"no_rope_layers", {json::array({1}), json::array({1, 2}), json::array({"x", 1}), 5}},
      {"full_attention_interval", counts},
      {"num_experts", counts},
      {"num_local_experts", counts},
      {"num_experts_per_tok", counts},
      {"moe_intermediate_size", counts},
      {"shared_expert_intermediate_size", counts},
      {"decoder_sparse_step", counts},
      {"mlp_only_layers", {json::array({-1}), json::array({1 << 20}), json::array({"1"}), 1}},
      {"linear_conv_kernel_dim", counts},
      {"linear_num_key_heads", counts},
      {"linear_num_value_heads", counts},
      {"query_pre_attn_scalar", {0, -1, 1e300}},
      {"logits_scaling", {0, -1, 1e-300}},
      {"attn_logit_softcapping", {-1, 1e300}},
      {"final_logit_softcapping", {-1, 1e300}},
      {"eos_token_id", {-1, int64_t(1) << 40, json::array({2, -3})}},
  };
}

// Every member of the objects under `at` as a JSON pointer, objects before their members;
// vision towers are never read, so they are left alone.
void collect_paths(const json& j, const json::json_pointer& at,
                   std::vector<json::json_pointer>& out) {
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    if (key == "vision_config") continue;
    const json::json_pointer p = at / key;
    out.push_back(p);
    collect_paths(value, p, out);
  }
}

// The config's text with the kRaw placeholder replaced by `raw`.
std::string dump_with_raw(const json& config, const std::string& raw) {
  std::string text = config.dump();
  const std::string quoted = "\"" + kRaw + "\"";
  text.replace(text.find(quoted), quoted.size(), raw);
  return text;
}

struct Counts {
  int tried = 0, loaded = 0, refused = 0;
};

// A private checkpoint dir sharing the fixture's weights; load() writes config.json and loads.
class Scratch {
 public:
  explicit Scratch(const fs::path& fixture) {
    std::error_code ec;
    fs::create_hard_link(fixture / "model.safetensors", dir_ / "model.safetensors", ec);
    if (ec) fs::copy_file(fixture / "model.safetensors", dir_ / "model.safetensors");
    if (fs::exists(fixture / "generation_config.json"))
      fs::copy_file(fixture / "generation_config.json", dir_ / "generation_config.json");
  }
  const fs::path& path() const { return dir_.path(); }

  // True when it loaded and ran; false for a hearth::Error; any other exception fails the test.
  bool load(const std::string& config_text, const std::string& what, Counts& counts) {
    test::write_bytes(dir_ / "config.json", config_text);
    ++counts.tried;
    try {
      auto model = load_model(dir_.path());
      run_a_few_tokens(*model);
      ++counts.loaded;
      return true;
    } catch (const Error&) {
      ++counts.refused;
      return false;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << typeid(e).name()
                    << " instead of hearth::Error: " << e.what();
    }
    return false;
  }

  // load() of config_with(v) for each of `values`, which start with kProbes; false when every
  // probe loaded: the field is never read, and the other values are skipped.
  template <typename ConfigWith>
  bool load_each(const std::vector<json>& values, const std::string& where, Counts& counts,
                 ConfigWith&& config_with) {
    size_t probes_loaded = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const bool loaded =
          load(config_with(values[i]).dump(), where + " = " + values[i].dump(), counts);
      if (i < kProbes.size()) probes_loaded += loaded;
      if (i + 1 == kProbes.size() && probes_loaded == kProbes.size()) return false;
    }
    return true;
  }

 private:
  static void run_a_few_tokens(Model& model) {
    const int64_t n_vocab = model.info().n_vocab;
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    auto seq = model.new_sequence();
    const std::vector<int32_t> prompt = {int32_t(1 % n_vocab), int32_t(2 % n_vocab),
                                         int32_t(3 % n_vocab)};
    model.forward(*seq, prompt, LogitsRows::Last, logits.data());
    const int32_t next = int32_t(4 % n_vocab);
    model.forward(*seq, std::span<const int32_t>(&next, 1), LogitsRows::Last, logits.data());
  }

  test::TempDir dir_;
};

// The model_type (wrapper and text) and the tensors, names and shapes: fixtures of one kind load
// through the same code, whatever their other config values.
std::string fixture_kind(const fs::path& fixture, const json& config,
                         const json::json_pointer& text) {
  std::string kind = config.value("model_type", "") + "/" + config[text].value("model_type", "");
  const WeightStore store = WeightStore::open(fixture);
  for (const std::string& name : store.names())
    kind += "|" + name + json(store.find(name)->shape).dump();
  return kind;
}

// The field of the text config (or of the top level) that holds `path`: a rope parameter is
// mutated again in each fixture whose rope parameters differ.
const json& holder(const json& config, const json::json_pointer& text, const std::string& path) {
  const size_t end = path.find('/', text.to_string().size() + 1);
  return config[json::json_pointer(path.substr(0, end))];
}

std::vector<fs::path> fixture_dirs() {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(std::string(HEARTH_TEST_DATA) + "/models"))
    if (fs::exists(entry.path() / "config.json") && fs::exists(entry.path() / "model.safetensors"))
      dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

TEST(ConfigMutation, EveryMutationLoadsOrFailsWithAnError) {
  // The fixtures are tiny: on a busy machine, waking pool threads for each op costs far more
  // than the work.
  ThreadPool::set_global_threads(1);
  struct RestorePool {
    ~RestorePool() { ThreadPool::set_global_threads(0); }
  } restore_pool;
  const auto dirs = fixture_dirs();
  ASSERT_GE(dirs.size(), 20u) << "fixtures not found under " << HEARTH_TEST_DATA;
  const auto elements = element_values();
  const auto added = added_fields();
  Counts total;
  // The mutations applied so far, by "kind|path|value of the text config's field that holds
  // it": a fixture of a kind already seen (same model_type, same tensors) only has the fields
  // that differ mutated (the llama rope variants share every other field with llama).
  std::set<std::string> done;
  for (const fs::path& fixture : dirs) {
    SCOPED_TRACE(fixture.filename().string());
    Scratch scratch(fixture);
    const json base = json::parse(test::read_bytes(fixture / "config.json"));
    Counts counts;
    ASSERT_TRUE(scratch.load(base.dump(), "unmutated", counts))
        << fixture << " must load unmutated, or the mutations prove nothing";

    const json::json_pointer text =
        base.contains("text_config") ? json::json_pointer("/text_config") : json::json_pointer();
    const std::string kind = fixture_kind(fixture, base, text);
    for (const std::string& token : parse_level_tokens()) {
      json c = base;
      c[text / "hidden_size"] = kRaw;
      scratch.load(dump_with_raw(c, token), "a field = " + token.substr(0, 20), counts);
    }

    std::vector<json::json_pointer> paths;
    collect_paths(base, json::json_pointer(), paths);
    std::vector<std::string> unread;  // paths (with a trailing '/') whose subtree is skipped
    for (const auto& p : paths) {
      const std::string path = p.to_string();
      if (std::any_of(unread.begin(), unread.end(),
                      [&](const std::string& u) { return path.rfind(u, 0) == 0; }))
        continue;
      const std::string where = fixture.filename().string() + ":" + path;
      const json& original = base[p];
      if (!done.insert(kind + "|" + path + "|" + holder(base, text, path).dump()).second) continue;
      const bool read = scratch.load_each(values_for(original), where, counts, [&](const json& v) {
        json c = base;
        c[p] = v;
        return c;
      });
      if (!read) {
        unread.push_back(path + "/");
        continue;
      }
      json removed = base;
      removed[p.parent_pointer()].erase(p.back());
      scratch.load(removed.dump(), where + " removed", counts);
      if (!original.is_array()) continue;
      // Entries are read in one loop: the first and the last stand for all.
      std::vector<size_t> ends;
      if (!original.empty()) ends.push_back(0);
      if (original.size() > 1) ends.push_back(original.size() - 1);
      for (size_t i : ends) {
        for (const json& e : elements) {
          json c = base;
          c[p][i] = e;
          scratch.load(c.dump(), where + "[" + std::to_string(i) + "] = " + e.dump(), counts);
        }
      }
      for (const json& resized :
           {json::array(), huge_array(original),
            json(std::vector<json>(original.begin(), original.end() - (original.empty() ? 0 : 1))),
            [&] {
              json longer = original;
              longer.push_back(original.empty() ? json(0) : original.back());
              return longer;
            }()}) {
        json c = base;
        c[p] = resized;
        scratch.load(c.dump(), where + " resized to " + std::to_string(resized.size()), counts);
      }
    }

    // Fields the fixture lacks (or has), set in the text config; how they are read depends on
    // the model_type alone.
    const std::string model_type = base[text].value("model_type", base.value("model_type", ""));
    for (const auto& [key, values] : added) {
      if (!done.insert(model_type + "|added " + key).second) continue;
      std::vector<json> probed = kProbes;
      probed.insert(probed.end(), values.begin(), values.end());
      scratch.load_each(probed, fixture.filename().string() + ": added " + key, counts,
                        [&, &key = key](const json& v) {
                          json c = base;
                          // rope_scaling is only read without rope_parameters (the v4 layout).
                          if (key == "rope_scaling") c[text].erase("rope_parameters");
                          c[text / key] = v;
                          return c;
                        });
    }

    EXPECT_GT(counts.tried, 1 + int(parse_level_tokens().size())) << "no field mutated";
    EXPECT_GT(counts.refused, 0);
    total.tried += counts.tried;
    total.loaded += counts.loaded;
    total.refused += counts.refused;
  }
  EXPECT_EQ(total.loaded + total.refused, total.tried);  // no other exception type
  EXPECT_GT(total.tried, 3000);
  EXPECT_GT(total.loaded, 500);
  RecordProperty("mutations", total.tried);
  std::printf("%zu fixtures, %d mutated configs: %d loaded and ran, %d refused with an error\n",
              dirs.size(), total.tried, total.loaded, total.refused);
}

// The context length is the user's choice: beyond what the model can address it is clamped
// (positions are int32), not an error.
TEST(ConfigMutation, UserContextBeyondAddressableIsClamped) {
  EngineOptions options;
  options.model_dir = std::string(HEARTH_TEST_DATA) + "/models/llama";
  options.n_ctx = INT64_MAX;
  options.kv_budget_bytes = SIZE_MAX;  // no KV budget (it would clamp the context too)
  auto engine = Engine::load(options);
  EXPECT_EQ(engine->n_ctx(), INT32_MAX);
  options.n_ctx = 0;  // the model's max_position_embeddings
  EXPECT_EQ(Engine::load(options)->n_ctx(), 256);
}

// The KV budget bounds the context to what one sequence can hold (the caches grow by doubling
// from 256 positions); a budget below 256 positions is refused, naming the option.
TEST(ConfigMutation, KvBudgetBoundsTheContext) {
  EngineOptions options;
  options.model_dir = std::string(HEARTH_TEST_DATA) + "/models/llama";
  auto model = load_model(options.model_dir);
  const size_t fixed = model->new_sequence()->bytes();
  const size_t per_token = size_t(model->info().kv_bytes_per_token);
  options.n_ctx = 100000;
  options.kv_budget_bytes = fixed + 1024 * per_token + per_token / 2;
  auto engine = Engine::load(options);
  EXPECT_EQ(engine->n_ctx(), 1024);
  EXPECT_EQ(engine->kv_budget(), options.kv_budget_bytes);
  options.kv_budget_bytes = fixed + 100 * per_token;
  try {
    Engine::load(options);
    FAIL() << "a budget below 256 positions loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth
