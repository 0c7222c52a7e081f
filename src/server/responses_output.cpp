#include "server/responses_output.h"

#include <fmt/format.h>

#include "server/schemas_responses.h"
#include "server/sse.h"

namespace hearth::server {

namespace {

bool responses_all_space(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

void ResponsesOutput::event(const std::string& type, const ojson& fields) {
  if (!sse_) {
    ++sequence_;
    return;
  }
  ojson e = {{"type", type}};
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
  e["sequence_number"] = sequence_++;
  *sse_ += "event: " + type + "\ndata: ";
  *sse_ += e.dump(-1, ' ', false, ojson::error_handler_t::replace);
  *sse_ += "\n\n";
}

void ResponsesOutput::add(const ChatOutput::Events& ev) {
  if (!ev.reasoning.empty()) reasoning(ev.reasoning);
  if (!ev.content.empty()) text(ev.content);
  for (const auto& c : ev.calls) call(c);
}

void ResponsesOutput::open(Kind kind) {
  const bool is_reasoning = kind == Kind::Reasoning;
  open_ = kind;
  open_id_ = random_id(is_reasoning ? "rs_" : "msg_");
  open_text_.clear();
  const size_t index = items_.size();
  // The item is added without content; its part follows (clients append parts as announced).
  ojson item = is_reasoning ? responses_reasoning_item(open_id_, "", "in_progress")
                            : responses_message_item(open_id_, "", "in_progress");
  item["content"] = ojson::array();
  event("response.output_item.added", {{"output_index", index}, {"item", std::move(item)}});
  event("response.content_part.added",
        {{"item_id", open_id_},
         {"output_index", index},
         {"content_index", 0},
         {"part", is_reasoning ? ojson{{"type", "reasoning_text"}, {"text", ""}}
                               : responses_output_text_part("")}});
  const char* type = is_reasoning ? "response.reasoning_text.delta" : "response.output_text.delta";
  delta_prefix_ = fmt::format(
      "event: {0}\ndata: {{\"type\":\"{0}\",\"item_id\":\"{1}\",\"output_index\":{2},"
      "\"content_index\":0,\"delta\":",
      type, open_id_, index);
  delta_middle_ = is_reasoning ? ",\"sequence_number\":" : ",\"logprobs\":[],\"sequence_number\":";
}

void ResponsesOutput::delta(std::string_view text) {
  open_text_ += text;
  if (!sse_) {
    ++sequence_;
    return;
  }
  std::string& out = *sse_;
  out += delta_prefix_;
  append_json_string(out, text);
  out += delta_middle_;
  out += std::to_string(sequence_++);
  out += "}\n\n";
}

void ResponsesOutput::close(const char* status) {
  held_space_.clear();
  if (open_ == Kind::None) return;
  const size_t index = items_.size();
  ojson item;
  if (open_ == Kind::Reasoning) {
    event("response.reasoning_text.done", {{"item_id", open_id_},
                                           {"output_index", index},
                                           {"content_index", 0},
                                           {"text", open_text_}});
    event("response.content_part.done",
          {{"item_id", open_id_},
           {"output_index", index},
           {"content_index", 0},
           {"part", {{"type", "reasoning_text"}, {"text", open_text_}}}});
    item = responses_reasoning_item(open_id_, open_text_, status);
  } else {
    event("response.output_text.done", {{"item_id", open_id_},
                                        {"output_index", index},
                                        {"content_index", 0},
                                        {"text", open_text_},
                                        {"logprobs", ojson::array()}});
    event("response.content_part.done", {{"item_id", open_id_},
                                         {"output_index", index},
                                         {"content_index", 0},
                                         {"part", responses_output_text_part(open_text_)}});
    item = responses_message_item(open_id_, open_text_, status);
  }
  event("response.output_item.done", {{"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  open_ = Kind::None;
  open_text_.clear();
}

void ResponsesOutput::reasoning(std::string_view text) {
  has_reasoning_ = true;
  if (open_ != Kind::Reasoning) {
    close("completed");
    open(Kind::Reasoning);
  }
  delta(text);
}

void ResponsesOutput::text(std::string_view text) {
  if (open_ != Kind::Message) {
    if (responses_all_space(text)) {
      held_space_ += text;
      return;
    }
    std::string held = std::move(held_space_);
    close("completed");
    open(Kind::Message);
    if (!held.empty()) delta(held);
  }
  delta(text);
}

void ResponsesOutput::call(const chat::ToolCall& c) {
  close("completed");
  const size_t index = items_.size();
  const std::string id = random_id("fc_"), call_id = random_id("call_");
  event("response.output_item.added",
        {{"output_index", index},
         {"item", responses_function_call_item(id, call_id, {c.name, ""}, "in_progress")}});
  event("response.function_call_arguments.delta",
        {{"item_id", id}, {"output_index", index}, {"delta", c.arguments}});
  event("response.function_call_arguments.done",
        {{"item_id", id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}});
  ojson item = responses_function_call_item(id, call_id, c, "completed");
  event("response.output_item.done", {{"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
}

void ResponsesOutput::finish(const char* status, bool ensure_message) {
  close(status);
  if (items_.empty() && ensure_message) {
    open(Kind::Message);
    close(status);
  }
}

}  // namespace hearth::server
