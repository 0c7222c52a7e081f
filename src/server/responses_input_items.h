// GET /v1/responses/{id}/input_items (OpenAI's "List input items"): a stored response's own
// input items, the ones its request sent (not those of the responses it continues through
// previous_response_id), a page at a time. Query: `limit` (1 to 100, default 20), `order` (asc,
// or desc: the last item first, the default), `after` / `before` (an item id: the items after
// / before it in that order), `include` (OpenAI's values are accepted and add nothing: no item
// here has the fields they ask for). The answer: {"object": "list", "data", "first_id",
// "last_id", "has_more"}. Every item has an id (schemas_responses.h) stored with the response,
// so the ids, and so the cursors, stay the same from call to call.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/responses_store.h"
#include "server/schemas.h"

namespace hearth::server {

struct ResponsesItemsQuery {
  size_t limit = 20;
  bool descending = true;
  std::optional<std::string> after;
  std::optional<std::string> before;
};

// The query parameters (names and values decoded). A bad limit, order or include value, or one
// of limit, order, after, before given twice, is a 400 naming the parameter; other parameters
// are ignored, as unknown fields are on the other routes.
ResponsesItemsQuery parse_responses_items_query(
    const std::vector<std::pair<std::string, std::string>>& params);

// Records in `entry` which items are its own input: the tail of `conversation` (already in
// entry->conversation) when it ends with `input`, else a copy of `input`.
void responses_store_input(StoredResponse& entry, const ojson& conversation, const ojson& input);

// The stored response's own input items, in the order they were sent (a 500 when the stored
// text cannot be read back).
ojson responses_stored_input(const StoredResponse& entry);

// The list object of one page of `items` (given in input order). An `after` or `before` that
// is not the id of one of them is a 400 naming the parameter.
ojson responses_items_page(const ojson& items, const ResponsesItemsQuery& query);

}  // namespace hearth::server
