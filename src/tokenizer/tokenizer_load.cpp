// Building a Tokenizer from tokenizer.json and its companions. Errors name the file and JSON
// path. Special tokens added by encode(text, true) come from tokenizer.json's post-processor
// only: tokenizer_config.json's add_bos_token/add_eos_token are not applied (neither HF
// tokenizers nor transformers 5 apply them; transformers 4's Llama classes did). See
// docs/tokenizer.md.
#include <cstdio>

#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"

namespace hearth {

using namespace tok;
using nlohmann::json;

namespace {

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::nullopt;
  std::string data;
  char buf[1 << 16];
  if (std::fseek(f, 0, SEEK_END) == 0) {
    long size = std::ftell(f);
    if (size > 0) data.reserve(static_cast<size_t>(size));
    std::fseek(f, 0, SEEK_SET);
  }
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) data.append(buf, n);
  bool ok = !std::ferror(f);
  std::fclose(f);
  if (!ok) return std::nullopt;
  return data;
}

// A special token in tokenizer_config.json is a string or an AddedToken object {"content": ...}.
std::string config_token(const json& config, const char* key, const std::string& where) {
  if (!config.is_object()) return {};
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail("{}.{}: expected a string or {{\"content\": ...}}", where, key);
}

void build_model(Tokenizer::Impl& im, TokenizerJson& tj, const std::string& file) {
  std::string where = file + ": model";
  if (!tj.doc.contains("model")) fail("{}: missing", where);
  const json& model = tj.doc["model"];
  std::string type = json_string_or(model, "type", "BPE", where);
  if (type != "BPE") fail("{}.type: unsupported model {:?} (hearth supports BPE)", where, type);
  if (!tj.has_vocab) fail("{}.vocab: missing", where);
  if (!tj.has_merges) fail("{}.merges: missing", where);
  BpeModel::Options opt;
  auto unk = model.find("unk_token");
  if (unk != model.end() && unk->is_string()) {
    opt.unk_token = unk->get<std::string>();
    opt.has_unk = true;
  }
  opt.fuse_unk = json_bool_or(model, "fuse_unk", false, where);
  opt.byte_fallback = json_bool_or(model, "byte_fallback", false, where);
  opt.ignore_merges = json_bool_or(model, "ignore_merges", false, where);
  opt.continuing_subword_prefix = json_string_or(model, "continuing_subword_prefix", "", where);
  opt.end_of_word_suffix = json_string_or(model, "end_of_word_suffix", "", where);
  im.model.build(std::move(tj.vocab), tj.merges, std::move(opt), where);
  tj.merges.clear();
  tj.merges.shrink_to_fit();
}

void build_added_tokens(Tokenizer::Impl& im, const json& doc, const std::string& file) {
  std::vector<AddedToken> raw, norm;
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<AddedToken>& all = im.added_tokens;
  auto it = doc.find("added_tokens");
  if (it != doc.end() && !it->is_null()) {
    if (!it->is_array()) fail("{}: added_tokens: expected an array", file);
    for (size_t i = 0; i < it->size(); ++i) {
      std::string where = fmt::format("{}: added_tokens[{}]", file, i);
      const json& t = (*it)[i];
      AddedToken a;
      int64_t id = json_int_or(t, "id", -1, where);
      if (id < 0 || id > INT32_MAX) fail("{}.id: expected a non-negative integer", where);
      if (id >= int64_t(im.model.size()) + int64_t(it->size()) + kMaxTokenIdHoles)
        fail("{}.id: {} is far past the {} tokens of the vocabulary and added_tokens", where, id,
             int64_t(im.model.size()) + int64_t(it->size()));
      a.id = static_cast<int32_t>(id);
      a.content = json_string(t, "content", where);
      a.special = json_bool_or(t, "special", false, where);
      a.lstrip = json_bool_or(t, "lstrip", false, where);
      a.rstrip = json_bool_or(t, "rstrip", false, where);
      a.normalized = json_bool_or(t, "normalized", !a.special, where);
      a.single_word = json_bool_or(t, "single_word", false, where);
      all.push_back(a);
      if (a.normalized) {
        norm_patterns.push_back(im.normalizer ? im.normalizer->apply(a.content) : a.content);
        norm.push_back(std::move(a));
      } else {
        raw_patterns.push_back(a.content);
        raw.push_back(std::move(a));
      }
    }
  }
  im.raw_added.build(std::move(raw), raw_patterns);
  im.normalized_added.build(std::move(norm), norm_patterns);

  int32_t n = im.model.size();
  for (const auto& a : all) n = std::max(n, a.id + 1);
  im.id_text.assign(static_cast<size_t>(n), std::string_view());
  im.id_kind.assign(static_cast<size_t>(n), Tokenizer::Impl::kNone);
  for (int32_t id = 0; id < im.model.size(); ++id) {
    if (!im.model.has_id(id)) continue;
    im.id_text[static_cast<size_t>(id)] = im.model.token(id);
    im.id_kind[static_cast<size_t>(id)] = Tokenizer::Impl::kModel;
  }
  for (const auto& a : all) {
    im.id_text[static_cast<size_t>(a.id)] = a.content;  // `all` is complete: views stay valid
    im.id_kind[static_cast<size_t>(a.id)] =
        a.special ? Tokenizer::Impl::kSpecial : Tokenizer::Impl::kAdded;
    im.added_index.emplace(a.content, a.id);
  }
}

void read_config(Tokenizer::Impl& im, const json& config, const json& special_map,
                 const std::string& config_name) {
  auto token = [&](const char* key) {
    std::string t = config_token(config, key, config_name);
    if (t.empty()) t = config_token(special_map, key, "special_tokens_map.json");
    return t;
  };
  auto id_of = [&](const std::string& t) -> std::optional<int32_t> {
    if (t.empty()) return std::nullopt;
    auto it = im.added_index.find(t);
    if (it != im.added_index.end()) return it->second;
    int32_t id = im.model.find(t);
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  };
  im.bos_token = token("bos_token");
  im.eos_token = token("eos_token");
  im.pad_token = token("pad_token");
  im.bos_id = id_of(im.bos_token);
  im.eos_id = id_of(im.eos_token);
  im.pad_id = id_of(im.pad_token);

  if (config.is_object()) {
    auto ct = config.find("chat_template");
    if (ct != config.end() && !ct->is_null()) {
      if (ct->is_string()) {
        im.chat_templates["default"] = ct->get<std::string>();
      } else if (ct->is_array()) {
        for (size_t i = 0; i < ct->size(); ++i) {
          std::string where = fmt::format("{}: chat_template[{}]", config_name, i);
          im.chat_templates[json_string((*ct)[i], "name", where)] =
              json_string((*ct)[i], "template", where);
        }
      } else {
        fail("{}: chat_template: expected a string or a list of {{name, template}}", config_name);
      }
    }
  }
}

std::shared_ptr<Tokenizer::Impl> build(std::string_view tokenizer_json, const std::string& file) {
  auto im = std::make_shared<Tokenizer::Impl>();
  TokenizerJson tj = parse_tokenizer_json(tokenizer_json, file);
  const json& doc = tj.doc;
  auto get = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = doc.find(key);
    return it == doc.end() ? null_value : *it;
  };
  im->normalizer = make_normalizer(get("normalizer"), file + ": normalizer");
  im->pre_tokenizer = make_pre_tokenizer(get("pre_tokenizer"), file + ": pre_tokenizer");
  im->post_processor = make_post_processor(get("post_processor"), file + ": post_processor");
  im->decoder = make_decoder(get("decoder"), file + ": decoder");
  im->decoder_groups_byte_tokens = im->decoder && im->decoder->groups_byte_tokens();
  build_model(*im, tj, file);
  if (im->pre_tokenizer.final_byte_level && im->model.can_use_byte_mode()) {
    im->model.enable_byte_mode();
    im->pre_tokenizer.set_byte_mode();
  }
  build_added_tokens(*im, doc, file);
  // encode() emits the post-processor's ids as they are: each must be a token of this file.
  for (const auto* ids : {&im->post_processor.prefix, &im->post_processor.suffix})
    for (int32_t id : *ids)
      if (id < 0 || size_t(id) >= im->id_text.size())
        fail("{}: post_processor: special token id {} is not in the vocabulary ({} ids)", file, id,
             im->id_text.size());
  if (is_plain_byte_level(im->decoder.get())) {
    im->byte_level_decode_fast = true;
    im->id_bytes.resize(im->id_text.size());
    for (size_t id = 0; id < im->id_text.size(); ++id)
      if (!byte_level_decode(im->id_text[id], im->id_bytes[id]))
        im->id_bytes[id] = std::string(im->id_text[id]);
  }
  return im;
}

json parse_small_json(std::string_view text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", name, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object", name);
  return j;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config,
                               const std::string& name) {
  auto im = build(tokenizer_json, name);
  json config = tokenizer_config.empty()
                    ? json()
                    : parse_small_json(tokenizer_config, "tokenizer_config.json");
  read_config(*im, config, json(), "tokenizer_config.json");
  return Tokenizer(std::move(im));
}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  auto path = dir / "tokenizer.json";
  auto text = read_file(path);
  if (!text) fail("{}: cannot read (a Hugging Face tokenizer.json is required)", path.string());
  auto im = build(*text, path.string());
  text.reset();

  json config, special_map;
  auto config_path = dir / "tokenizer_config.json";
  if (auto c = read_file(config_path)) config = parse_small_json(*c, config_path.string());
  auto map_path = dir / "special_tokens_map.json";
  if (auto m = read_file(map_path)) special_map = parse_small_json(*m, map_path.string());
  read_config(*im, config, special_map, config_path.string());
  // transformers saves the template in its own file; it wins over the config's.
  if (auto jinja = read_file(dir / "chat_template.jinja")) im->chat_templates["default"] = *jinja;
  return Tokenizer(std::move(im));
}

}  // namespace hearth
