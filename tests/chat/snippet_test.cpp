// The ~190 construct-by-construct snippets of tools/reference/chat_snippets.txt, rendered by
// Jinja2 in transformers' environment: output must match byte for byte, errors must be errors.
#include <gtest/gtest.h>

#include <set>

#include "chat/template.h"
#include "reference_util.h"

namespace hearth::chat {
namespace {

using testing::reference;

// Differences we accept and document in docs/chat-templates.md.
const std::set<std::string> kKnownDifferences = {
    "globals_range_print",  // range() is a list here; Jinja prints "range(0, 3)"
};

TEST(ChatSnippets, MatchJinja2) {
  RenderOptions opts;
  opts.now = testing::frozen_now();
  const auto& ctx = reference()["snippet_context"];
  size_t checked = 0;
  for (const auto& s : reference()["snippets"]) {
    std::string name = s["name"];
    if (kKnownDifferences.count(name)) continue;
    SCOPED_TRACE("snippet " + name + ":\n" + s["template"].get<std::string>());
    ++checked;
    if (s.contains("output")) {
      try {
        EXPECT_EQ(ChatTemplate::parse(s["template"].get<std::string>()).render(ctx, opts),
                  s["output"].get<std::string>());
      } catch (const std::exception& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
      }
      continue;
    }
    const auto& err = s["error"];
    try {
      std::string got = ChatTemplate::parse(s["template"].get<std::string>()).render(ctx, opts);
      ADD_FAILURE() << "expected " << err.dump() << "\nbut rendered: " << got;
    } catch (const TemplateRaise& e) {
      EXPECT_TRUE(testing::is_template_raise(err)) << e.what();
      EXPECT_EQ(std::string(e.what()), err["message"].get<std::string>());
    } catch (const TemplateError& e) {
      EXPECT_FALSE(testing::is_template_raise(err)) << e.what();
    }
  }
  EXPECT_GE(checked, 180u);
}

}  // namespace
}  // namespace hearth::chat
