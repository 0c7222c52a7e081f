// GET /v1/responses/{id}/input_items without HTTP: the query string's decoding, the query's
// 400s naming the parameter, the pages in both orders with after / before cursors and limits,
// the input items' ids (kept, or given, and refused when repeated), and which items a stored
// response lists as its own (the tail of its conversation, or a copy when truncation cut it).
#include "server/responses_input_items.h"

#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/http/message.h"
#include "server/schemas_responses.h"

namespace hearth::server {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

TEST(RequestQuery, DecodesNamesAndValuesInOrder) {
  http::Request req;
  req.target =
      "/v1/responses/resp_1/input_items?limit=2&order=asc&&include%5B%5D=a%2Eb&x&q=a+b%20c%zz";
  EXPECT_EQ(
      req.query_params(),
      (Params{
          {"limit", "2"}, {"order", "asc"}, {"include[]", "a.b"}, {"x", ""}, {"q", "a b c%zz"}}));
  req.target = "/v1/models";
  EXPECT_TRUE(req.query_params().empty());
  req.target = "/v1/models?";
  EXPECT_TRUE(req.query_params().empty());
  req.target = "/p?a=%4";  // a '%' without two hex digits is kept
  EXPECT_EQ(req.query_params(), (Params{{"a", "%4"}}));
}

// The parameter and code of the 400 a query gets, or "(no error)".
std::string query_error(const Params& params, std::string* code = nullptr) {
  try {
    parse_responses_items_query(params);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    if (code) *code = e.code;
    return e.param;
  }
  return "(no error)";
}

TEST(ResponsesItemsQuery, DefaultsAndValues) {
  ResponsesItemsQuery q = parse_responses_items_query({});
  EXPECT_EQ(q.limit, 20u);
  EXPECT_TRUE(q.descending);
  EXPECT_FALSE(q.after || q.before);
  q = parse_responses_items_query({{"limit", "100"},
                                   {"order", "asc"},
                                   {"after", "msg_1"},
                                   {"before", "msg_2"},
                                   {"include[]", "message.input_image.image_url"},
                                   {"include", "reasoning.encrypted_content"},
                                   {"include[0]", "message.output_text.logprobs"},
                                   {"stream", "true"}});  // unknown parameters are ignored
  EXPECT_EQ(q.limit, 100u);
  EXPECT_FALSE(q.descending);
  EXPECT_EQ(q.after, "msg_1");
  EXPECT_EQ(q.before, "msg_2");
  EXPECT_EQ(parse_responses_items_query({{"limit", "1"}, {"order", "desc"}}).limit, 1u);
}

TEST(ResponsesItemsQuery, ErrorsNameTheParameter) {
  std::string code;
  EXPECT_EQ(query_error({{"limit", "0"}}, &code), "limit");
  EXPECT_EQ(code, "integer_below_min_value");
  EXPECT_EQ(query_error({{"limit", "101"}}, &code), "limit");
  EXPECT_EQ(code, "integer_above_max_value");
  EXPECT_EQ(query_error({{"limit", "99999999999999999999999"}}, &code), "limit");
  EXPECT_EQ(code, "integer_above_max_value");
  EXPECT_EQ(query_error({{"limit", "-99999999999999999999999"}}, &code), "limit");
  EXPECT_EQ(code, "integer_below_min_value");
  for (const char* bad : {"", "ten", "5x", "2.5", " 5", "1e2"}) {
    EXPECT_EQ(query_error({{"limit", bad}}, &code), "limit") << bad;
    EXPECT_EQ(code, "invalid_type") << bad;
  }
  EXPECT_EQ(query_error({{"order", "up"}}, &code), "order");
  EXPECT_EQ(code, "invalid_value");
  EXPECT_EQ(query_error({{"order", "ASC"}}), "order");
  EXPECT_EQ(
      query_error({{"include[]", "message.input_image.image_url"}, {"include[]", "usage"}}, &code),
      "include");
  EXPECT_EQ(code, "invalid_value");
  EXPECT_EQ(query_error({{"include", ""}}), "include");
  EXPECT_EQ(query_error({{"limit", "2"}, {"limit", "3"}}), "limit");
  EXPECT_EQ(query_error({{"after", "a"}, {"after", "b"}}), "after");
}

ojson items_of(size_t n) {
  ojson items = ojson::array();
  for (size_t i = 0; i < n; ++i)
    items.push_back({{"type", "message"},
                     {"id", "msg_" + std::to_string(i)},
                     {"role", "user"},
                     {"content", ojson::array()}});
  return items;
}

std::vector<std::string> ids_of(const ojson& page) {
  std::vector<std::string> ids;
  for (const auto& item : page["data"]) ids.push_back(item["id"]);
  return ids;
}

ojson page_of(const ojson& items, size_t limit, bool descending, const char* after = nullptr,
              const char* before = nullptr) {
  ResponsesItemsQuery q;
  q.limit = limit;
  q.descending = descending;
  if (after) q.after = after;
  if (before) q.before = before;
  return responses_items_page(items, q);
}

TEST(ResponsesItemsPage, BothOrdersWithLimitsAndCursors) {
  const ojson items = items_of(5);
  using Ids = std::vector<std::string>;
  ojson p = page_of(items, 20, true);
  EXPECT_EQ(p["object"], "list");
  EXPECT_EQ(ids_of(p), (Ids{"msg_4", "msg_3", "msg_2", "msg_1", "msg_0"}));
  EXPECT_EQ(p["first_id"], "msg_4");
  EXPECT_EQ(p["last_id"], "msg_0");
  EXPECT_EQ(p["has_more"], false);
  EXPECT_EQ(p["data"][0]["status"], "completed");  // listed items have a status

  // Ascending, two at a time, each page after the last one's last id.
  p = page_of(items, 2, false);
  EXPECT_EQ(ids_of(p), (Ids{"msg_0", "msg_1"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 2, false, "msg_1");
  EXPECT_EQ(ids_of(p), (Ids{"msg_2", "msg_3"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 2, false, "msg_3");
  EXPECT_EQ(ids_of(p), (Ids{"msg_4"}));
  EXPECT_EQ(p["has_more"], false);
  p = page_of(items, 2, false, "msg_4");  // after the last: an empty page
  EXPECT_EQ(ids_of(p), Ids{});
  EXPECT_EQ(p["first_id"], nullptr);
  EXPECT_EQ(p["last_id"], nullptr);
  EXPECT_EQ(p["has_more"], false);

  // Descending: after goes on towards the first item sent.
  p = page_of(items, 2, true, "msg_3");
  EXPECT_EQ(ids_of(p), (Ids{"msg_2", "msg_1"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 5, true, "msg_1");
  EXPECT_EQ(ids_of(p), (Ids{"msg_0"}));
  EXPECT_EQ(p["has_more"], false);

  // before: the page just before the cursor, in the same order.
  p = page_of(items, 2, false, nullptr, "msg_4");
  EXPECT_EQ(ids_of(p), (Ids{"msg_2", "msg_3"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 2, false, nullptr, "msg_2");
  EXPECT_EQ(ids_of(p), (Ids{"msg_0", "msg_1"}));
  EXPECT_EQ(p["has_more"], false);
  p = page_of(items, 2, true, nullptr, "msg_0");
  EXPECT_EQ(ids_of(p), (Ids{"msg_2", "msg_1"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 2, true, nullptr, "msg_4");
  EXPECT_EQ(ids_of(p), Ids{});
  EXPECT_EQ(p["has_more"], false);

  // Both: the items between them, from after on.
  p = page_of(items, 20, false, "msg_0", "msg_4");
  EXPECT_EQ(ids_of(p), (Ids{"msg_1", "msg_2", "msg_3"}));
  p = page_of(items, 2, false, "msg_0", "msg_4");
  EXPECT_EQ(ids_of(p), (Ids{"msg_1", "msg_2"}));
  EXPECT_EQ(p["has_more"], true);
  p = page_of(items, 20, false, "msg_3", "msg_1");  // crossed: nothing between
  EXPECT_EQ(ids_of(p), Ids{});
  EXPECT_EQ(p["has_more"], false);

  p = page_of(items, 1, true);
  EXPECT_EQ(ids_of(p), (Ids{"msg_4"}));
  EXPECT_EQ(p["has_more"], true);
}

TEST(ResponsesItemsPage, AnUnknownCursorIsA400NamingIt) {
  for (const char* param : {"after", "before"}) {
    try {
      if (std::string(param) == "after")
        page_of(items_of(3), 20, true, "msg_9");
      else
        page_of(items_of(3), 20, true, nullptr, "");
      ADD_FAILURE() << param << ": no error";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param);
    }
  }
}

TEST(ResponsesItemIds, KeptGivenAndUnique) {
  const ResponsesRequest r = parse_responses_request(ojson::parse(R"({"input": [
      {"role": "user", "content": "Weather?"},
      {"type": "message", "id": "msg_mine", "role": "assistant", "content": "Let me see."},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]}]})"));
  ASSERT_EQ(r.input.size(), 5u);
  EXPECT_EQ(r.input[0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(r.input[1]["id"], "msg_mine");
  EXPECT_EQ(r.input[2]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(r.input[3]["id"].get<std::string>().rfind("fco_", 0), 0u);
  EXPECT_EQ(r.input[3]["type"], "function_call_output");
  EXPECT_EQ(r.input[4]["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(r.input[0].begin().key(), "type");  // the id follows the type, as on OpenAI's items
  EXPECT_EQ(std::next(r.input[0].begin()).key(), "id");
  EXPECT_NE(r.input[0]["id"], parse_responses_request({{"input", "x"}}).input[0]["id"]);

  auto param_of = [](const char* body) {
    try {
      parse_responses_request(ojson::parse(body));
    } catch (const ApiError& e) {
      return e.param;
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": "a", "id": "m"},
                                   {"role": "user", "content": "b", "id": "m"}]})"),
            "input[1].id");
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": "a", "id": 7}]})"), "input[0].id");
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": "a", "id": ""}]})"), "input[0].id");
}

TEST(ResponsesStoredInput, TheTailOfTheConversationOrACopy) {
  const ojson before = items_of(3);  // earlier responses' items
  ojson input = ojson::array();
  for (const char* id : {"msg_a", "msg_b"})
    input.push_back({{"type", "message"}, {"id", id}, {"role", "user"}, {"content", "x"}});
  ojson conversation = before;
  for (const auto& item : input) conversation.push_back(item);

  StoredResponse whole;
  whole.conversation = conversation.dump();
  responses_store_input(whole, conversation, input);
  EXPECT_EQ(whole.input_begin, 3u);
  EXPECT_TRUE(whole.input.empty());  // stored once
  EXPECT_EQ(responses_stored_input(whole), input);

  // Truncation dropped the first input item: the input is kept apart, whole.
  const ojson cut = ojson::array({before[0], input[1]});
  StoredResponse truncated;
  truncated.conversation = cut.dump();
  responses_store_input(truncated, cut, input);
  EXPECT_FALSE(truncated.input.empty());
  EXPECT_EQ(responses_stored_input(truncated), input);
  EXPECT_GT(truncated.bytes(), truncated.conversation.size() + truncated.input.size());

  StoredResponse broken;
  broken.conversation = "[1, 2";
  EXPECT_THROW(responses_stored_input(broken), ApiError);
}

}  // namespace
}  // namespace hearth::server
