#include "server/responses_input_items.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <set>

#include "core/json_bounded.h"
#include "server/errors.h"

namespace hearth::server {

namespace {

// OpenAI's ResponseIncludable values. None adds anything to the items this server stores (it
// keeps no images, search results, encrypted reasoning or logprobs), so they are accepted and
// change nothing; any other value is refused as OpenAI refuses it.
constexpr std::array<const char*, 8> kResponsesIncludable = {
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs"};

size_t responses_items_limit(const std::string& text) {
  constexpr int64_t kMax = 100;
  int64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, n);
  if (text.empty() || at != end || ec == std::errc::invalid_argument)
    bad_request("limit must be an integer from 1 to 100, got '" + text + "'", "limit",
                "invalid_type");
  if (ec == std::errc::result_out_of_range) n = text[0] == '-' ? 0 : kMax + 1;
  if (n < 1)
    bad_request("limit must be an integer from 1 to 100, got " + text, "limit",
                "integer_below_min_value");
  if (n > kMax)
    bad_request("limit must be an integer from 1 to 100, got " + text, "limit",
                "integer_above_max_value");
  return size_t(n);
}

// The include parameter as the SDKs send a list: include[]=a&include[]=b (openai-node's and
// openai-python's "brackets" format), include=a&include=b, or include[0]=a.
bool responses_items_is_include(const std::string& key) {
  return key == "include" || (key.starts_with("include[") && key.ends_with("]"));
}

void responses_items_check_include(const std::string& value) {
  for (const char* known : kResponsesIncludable)
    if (value == known) return;
  std::string supported;
  for (const char* known : kResponsesIncludable)
    supported += std::string(supported.empty() ? "" : ", ") + known;
  bad_request("include: unknown value '" + value + "' (supported: " + supported + ")", "include",
              "invalid_value");
}

// Input items are listed with a status, as OpenAI's are; what was sent is complete.
ojson responses_listed_item(const ojson& item) {
  ojson out = item;
  if (!out.contains("status")) out["status"] = "completed";
  return out;
}

}  // namespace

ResponsesItemsQuery parse_responses_items_query(
    const std::vector<std::pair<std::string, std::string>>& params) {
  ResponsesItemsQuery q;
  std::set<std::string> seen;
  for (const auto& [key, value] : params) {
    if (responses_items_is_include(key)) {
      responses_items_check_include(value);
      continue;
    }
    if (key != "limit" && key != "order" && key != "after" && key != "before") continue;
    if (!seen.insert(key).second) bad_request(key + " is given more than once", key);
    if (key == "limit") {
      q.limit = responses_items_limit(value);
    } else if (key == "order") {
      if (value != "asc" && value != "desc")
        bad_request("order must be asc or desc, got '" + value + "'", "order", "invalid_value");
      q.descending = value == "desc";
    } else {
      (key == "after" ? q.after : q.before) = value;
    }
  }
  return q;
}

void responses_store_input(StoredResponse& entry, const ojson& conversation, const ojson& input) {
  const bool at_the_end =
      conversation.size() >= input.size() &&
      std::equal(input.begin(), input.end(), conversation.end() - ptrdiff_t(input.size()));
  if (at_the_end) {
    entry.input_begin = conversation.size() - input.size();
    entry.input.clear();
  } else {
    entry.input = input.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

ojson responses_stored_input(const StoredResponse& entry) {
  const bool own = !entry.input.empty();
  ojson items;
  if (parse_json_bounded(own ? entry.input : entry.conversation, items) != JsonParseStatus::Ok ||
      !items.is_array() || (!own && entry.input_begin > items.size()))
    throw ApiError(500, "the stored response's input items are unreadable");
  if (own) return items;
  ojson out = ojson::array();
  for (size_t i = entry.input_begin; i < items.size(); ++i) out.push_back(std::move(items[i]));
  return out;
}

ojson responses_items_page(const ojson& items, const ResponsesItemsQuery& q) {
  const size_t n = items.size();
  // Position i of the list in the order asked for is items[ordered(i)].
  auto ordered = [&](size_t i) { return q.descending ? n - 1 - i : i; };
  auto position_of = [&](const std::string& id, const char* param) {
    for (size_t i = 0; i < n; ++i)
      if (items[ordered(i)].value("id", "") == id) return i;
    bad_request(
        std::string(param) + ": '" + id + "' is not the id of an input item of this response",
        param);
  };
  // The window the cursors leave: positions [lo, hi).
  const size_t lo = q.after ? position_of(*q.after, "after") + 1 : 0;
  const size_t hi = q.before ? position_of(*q.before, "before") : n;
  size_t first = lo, last = lo;
  bool has_more = false;
  if (lo < hi) {
    if (q.before && !q.after) {  // the items just before the cursor (the previous page)
      first = hi - std::min(hi - lo, q.limit);
      last = hi;
      has_more = first > lo;
    } else {
      last = lo + std::min(hi - lo, q.limit);
      has_more = last < hi;
    }
  }
  ojson data = ojson::array();
  for (size_t i = first; i < last; ++i) data.push_back(responses_listed_item(items[ordered(i)]));
  ojson first_id = data.empty() ? ojson() : data.front()["id"];
  ojson last_id = data.empty() ? ojson() : data.back()["id"];
  return {{"object", "list"},
          {"data", std::move(data)},
          {"first_id", std::move(first_id)},
          {"last_id", std::move(last_id)},
          {"has_more", has_more}};
}

}  // namespace hearth::server
