// POST /v1/embeddings (OpenAI): `input` as a string, a list of strings, a list of token ids or
// a list of such lists (at most 2,048 inputs, each within the context); `encoding_format`
// "float" (default) or "base64" (the little-endian f32 bytes, which the official SDKs ask for
// and decode); `dimensions` keeps the first N values and normalises again. Each input is
// tokenized with the model's special tokens (Qwen3-Embedding's tokenizer appends the
// end-of-text token its last-token pooling reads) and embedded between engine steps.
#include <cstring>

#include "server/http_util.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

namespace {

using nlohmann::json;

constexpr size_t kMaxInputs = 2048;

std::string base64(const std::vector<float>& values) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());  // x86 and ARM Linux: little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (n > 1) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (n > 2) v |= uint32_t(uint8_t(bytes[i + 2]));
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += n > 1 ? digits[(v >> 6) & 63] : '=';
    out += n > 2 ? digits[v & 63] : '=';
  }
  return out;
}

std::vector<int32_t> token_ids(const ojson& list, int64_t n_vocab, const std::string& where) {
  std::vector<int32_t> ids;
  for (const auto& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
      bad_request(where + ": token ids must be integers in [0, " + std::to_string(n_vocab) + ")",
                  "input");
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return ids;
}

// The inputs as token lists, in order.
std::vector<std::vector<int32_t>> inputs_of(const ServedModel& m, const ojson& body) {
  const ojson* input = field(body, "input");
  if (!input) bad_request("input is required: a string, a list of strings or token ids", "input");
  const int64_t n_vocab = m.engine->info().n_vocab;
  const Tokenizer* tok = m.engine->tokenizer();
  auto text = [&](const ojson& v, const std::string& where) {
    if (!tok) bad_request("this model has no tokenizer: give the input as token ids", "input");
    const std::string str = v.get<std::string>();
    if (str.empty()) bad_request(where + " is an empty string", "input");
    return tok->encode(str, true);
  };
  std::vector<std::vector<int32_t>> out;
  if (input->is_string()) {
    out.push_back(text(*input, "input"));
  } else if (input->is_array() && !input->empty() && input->front().is_number()) {
    out.push_back(token_ids(*input, n_vocab, "input"));
  } else if (input->is_array() && !input->empty()) {
    if (input->size() > kMaxInputs)
      bad_request("input has " + std::to_string(input->size()) + " items; at most " +
                      std::to_string(kMaxInputs) + " are allowed",
                  "input");
    for (size_t i = 0; i < input->size(); ++i) {
      const ojson& item = (*input)[i];
      const std::string where = "input[" + std::to_string(i) + "]";
      if (item.is_string())
        out.push_back(text(item, where));
      else if (item.is_array() && !item.empty())
        out.push_back(token_ids(item, n_vocab, where));
      else
        bad_request(where + " must be a string or a non-empty list of token ids", "input");
    }
  } else {
    bad_request("input must be a string, a list of strings, or a non-empty list of token ids",
                "input");
  }
  const int64_t n_ctx = m.engine->n_ctx();
  for (size_t i = 0; i < out.size(); ++i)
    if (int64_t(out[i].size()) > n_ctx)
      bad_request("input" + (out.size() > 1 ? "[" + std::to_string(i) + "]" : std::string()) +
                      " has " + std::to_string(out[i].size()) +
                      " tokens, more than this model's context of " + std::to_string(n_ctx),
                  "input", "context_length_exceeded");
  return out;
}

void embeddings(ServerState& s, const ojson& body, http::Response& res) {
  const ModelRef served = acquire_model(s, body);
  const ServedModel& m = *served;
  const std::string format = get_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    bad_request("encoding_format must be \"float\" or \"base64\", got \"" + format + "\"",
                "encoding_format");
  const int64_t n_embd = m.engine->info().n_embd;
  const std::optional<int64_t> dimensions = get_int(body, "dimensions", 1, n_embd);
  const auto inputs = inputs_of(m, body);
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (s.stopping) throw ApiError(503, "the server is shutting down");
    std::vector<float> v = m.engine->embed(inputs[i]);  // errors name the input's problem: 400
    if (dimensions) truncate_embedding(v, *dimensions, m.engine->embedding_config().normalize);
    tokens += int64_t(inputs[i].size());
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64")
      item["embedding"] = base64(v);
    else
      item["embedding"] = v;
    data.push_back(std::move(item));
  }
  send_json(res, {{"object", "list"},
                  {"data", std::move(data)},
                  {"model", m.model_id},
                  {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

}  // namespace

void register_embedding_routes(http::Router& http, ServerState& s) {
  http.post("/v1/embeddings", json_post(s, ApiStyle::OpenAI, "/v1/embeddings",
                                        [&s](const ojson& b, const http::Request&,
                                             http::Response& r) { embeddings(s, b, r); }));
}

}  // namespace hearth::server
