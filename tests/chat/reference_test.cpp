// Every (template x conversation) render recorded from transformers' apply_chat_template must
// come out of hearth byte for byte; every recorded failure must fail here too, and a template's
// raise_exception must surface as TemplateRaise with the same message.
#include <gtest/gtest.h>

#include <map>

#include "chat/template.h"
#include "reference_util.h"

namespace hearth::chat {
namespace {

using testing::reference;

struct Loaded {
  std::optional<ChatTemplate> tmpl;
  std::string parse_error;
  nlohmann::ordered_json info;
};

const std::map<std::string, Loaded>& templates() {
  static const std::map<std::string, Loaded> all = [] {
    std::map<std::string, Loaded> m;
    for (const auto& t : reference()["templates"]) {
      Loaded l;
      l.info = t;
      if (t["template"].is_string()) {
        try {
          l.tmpl = ChatTemplate::parse(t["template"].get<std::string>());
        } catch (const std::exception& e) {
          l.parse_error = e.what();
        }
      }
      m[t["name"].get<std::string>()] = std::move(l);
    }
    return m;
  }();
  return all;
}

const nlohmann::ordered_json& conversation(const std::string& name) {
  for (const auto& c : reference()["conversations"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no conversation " + name);
}

// Renders one case the way the reference did: apply_chat_template for tokenizer folders (with
// its validation), render_jinja_template for standalone files.
std::string render_case(const Loaded& l, const nlohmann::ordered_json& c,
                        bool add_generation_prompt) {
  if (!l.tmpl) throw TemplateError(l.parse_error.empty() ? "no chat template" : l.parse_error);
  ChatInputs in;
  in.messages = c["messages"];
  if (c.contains("tools")) in.tools = c["tools"];
  if (c.contains("documents")) in.documents = c["documents"];
  if (c.contains("kwargs")) in.kwargs = c["kwargs"];
  in.add_generation_prompt = add_generation_prompt;
  in.special_tokens = l.info["special_tokens"];
  RenderOptions opts;
  opts.now = testing::frozen_now();
  if (l.info["source"].get<std::string>().rfind("tokenizer:", 0) == 0)
    return render_chat(*l.tmpl, in, opts);
  return l.tmpl->render(build_chat_context(in), opts);
}

TEST(ChatReference, GeneratedByTransformersWithFrozenClock) {
  const auto& gen = reference()["generator"];
  EXPECT_EQ(gen["transformers"], "5.17.0");
  EXPECT_TRUE(gen["clock_frozen"].get<bool>());
  EXPECT_GE(reference()["cases"].size(), 600u);
}

TEST(ChatReference, EveryCaseMatches) {
  int matched = 0, failed_as_expected = 0;
  for (const auto& k : reference()["cases"]) {
    std::string tname = k["template"], cname = k["conversation"];
    bool agp = k["add_generation_prompt"];
    SCOPED_TRACE(tname + " x " + cname + (agp ? " +gen" : " -gen"));
    const Loaded& l = templates().at(tname);
    const auto& c = conversation(cname);
    if (k.contains("output")) {
      std::string got;
      try {
        got = render_case(l, c, agp);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(got, k["output"].get<std::string>());
      matched += got == k["output"].get<std::string>();
    } else {
      const auto& err = k["error"];
      try {
        std::string got = render_case(l, c, agp);
        ADD_FAILURE() << "expected " << err["type"].get<std::string>() << ": "
                      << err["message"].get<std::string>() << "\nbut rendered: " << got;
      } catch (const TemplateRaise& e) {
        EXPECT_TRUE(testing::is_template_raise(err))
            << "raised " << e.what() << " but reference has " << err.dump();
        EXPECT_EQ(std::string(e.what()), err["message"].get<std::string>());
        ++failed_as_expected;
      } catch (const hearth::Error& e) {
        EXPECT_FALSE(testing::is_template_raise(err))
            << "expected raise_exception(" << err["message"] << "), got " << e.what();
        ++failed_as_expected;
      }
    }
  }
  EXPECT_GT(matched, 400);
  EXPECT_GT(failed_as_expected, 50);
}

TEST(ChatReference, AllTemplatesParse) {
  for (const auto& [name, l] : templates()) {
    if (l.info["template"].is_string()) {
      EXPECT_TRUE(l.tmpl.has_value()) << name << ": " << l.parse_error;
    }
  }
}

}  // namespace
}  // namespace hearth::chat
