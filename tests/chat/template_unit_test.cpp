// Hand-written checks of the chat-template engine: Jinja2 semantics with expected outputs
// worked out by hand (whitespace control, scoping, Python printing), error messages with line
// and column, raise_exception, and hostile templates that must end in an error, not a crash.
#include <gtest/gtest.h>

#include "chat/pystr.h"
#include "chat/template.h"
#include "core/json_bounded.h"

namespace hearth::chat {
namespace {

std::string render(const std::string& src,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   const RenderOptions& opts = {}) {
  return ChatTemplate::parse(src).render(ctx, opts);
}

std::string error_of(const std::string& src,
                     const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                     const RenderOptions& opts = {}) {
  try {
    render(src, ctx, opts);
  } catch (const TemplateRaise& e) {
    return std::string("raise: ") + e.what();
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ChatTemplateWhitespace, TrimAndLstripBlocks) {
  // trim_blocks eats the newline after %}, lstrip_blocks the indentation before {%.
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  // Not for {{ }}: the indentation before a print statement stays.
  EXPECT_EQ(render("  {{ 'v' }}\n"), "  v");
  // Mid-line tags keep the text before them.
  EXPECT_EQ(render("t {% if true %}X{% endif %} u"), "t X u");
  // `-` strips all whitespace, newlines included; `+` disables lstrip.
  EXPECT_EQ(render("a  \n  {%- if true -%}  \n  b{% endif %}"), "ab");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("a {{- 'b' -}} c"), "abc");
  // Comments obey the same rules; one trailing newline of the template is dropped.
  EXPECT_EQ(render("  {# note #}\nx\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  // CRLF becomes LF.
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"), "a\nb\nc");
}

TEST(ChatTemplateValues, PythonPrinting) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 1e16 }} {{ 0.00001 }} {{ 2 ** 0.5 }}"),
            "1.0 3.5 2.0 1e+16 1e-05 1.4142135623730951");
  EXPECT_EQ(render("{{ true }} {{ none }} {{ missing }}|"), "True None |");
  EXPECT_EQ(render("{{ ['a', 1, none, true, 2.5] }}"), "['a', 1, None, True, 2.5]");
  EXPECT_EQ(render("{{ {'k': 'v', 'n': [1]} }} {{ (1,) }}"), "{'k': 'v', 'n': [1]} (1,)");
  EXPECT_EQ(render("{{ [\"it's\"] }}"), "[\"it's\"]");
  EXPECT_EQ(render("{{ 'ab' * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}"), "ababab 3 -4 2");
}

TEST(ChatTemplateValues, ToJsonIsPythonJsonDumps) {
  nlohmann::ordered_json ctx =
      nlohmann::ordered_json::parse(R"({"t": {"z": 1, "a": [1.5, null, "é\n"]}})");
  EXPECT_EQ(render("{{ t | tojson }}", ctx), R"({"z": 1, "a": [1.5, null, "é\n"]})");
  EXPECT_EQ(render("{{ t | tojson(indent=2) }}", ctx),
            "{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    null,\n    \"é\\n\"\n  ]\n}");
  EXPECT_EQ(render("{{ t | tojson(sort_keys=true, ensure_ascii=true) }}", ctx),
            R"({"a": [1.5, null, "\u00e9\n"], "z": 1})");
}

TEST(ChatTemplateScoping, LoopsDoNotLeakButNamespacesDo) {
  EXPECT_EQ(
      render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}"),
      "23|1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% "
                   "endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% if true %}{% set y = 'y' %}{% endif %}{{ y }}"), "y");
}

TEST(ChatTemplateLoops, LoopObjectAndControls) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ 'F' if loop.first "
                   "}}{{ 'L' if loop.last }}"
                   "{{ loop.previtem | default('-') }}{% endfor %}"),
            "12F-21a30Lb");
  EXPECT_EQ(render("{% for x in range(10) if x is even %}{% if x > 6 %}{% break %}{% endif %}{{ x "
                   "}}/{{ loop.length }} "
                   "{% endfor %}"),
            "0/5 2/5 4/5 6/5 ");
  EXPECT_EQ(
      render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% else %}none{% endfor %}"),
      "a1b2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(ChatTemplateMacros, DefaultsCallerAndBlocks) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"),
            "1B12");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
            "<in>");
  EXPECT_EQ(render("{% set s %}a{{ 1 + 1 }}{% endset %}{{ s }}{% filter upper %}x{% endfilter %}"),
            "a2X");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(ChatTemplateMethods, StringsListsDicts) {
  EXPECT_EQ(render("{{ '<think>a</think>\\n\\nb'.split('</think>')[-1].lstrip('\\n') }}"), "b");
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'hey'.startswith(('x', 'h')) }}"),
            "x|['a', 'b']|True");
  EXPECT_EQ(render("{{ {'a': 1}.get('b', 2) }} {{ [3, 1] | sort | join(',') }}"), "2 1,3");
  EXPECT_EQ(render("{{ 'héllo'[1:3] }} {{ 'héllo' | length }} {{ 'ß' | upper }}"), "él 5 SS");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("a\n{{ 1 + }}"),
            "chat template: line 2, column 8: unexpected 'end of print statement'");
  EXPECT_EQ(error_of("{% if x %}\nno end"),
            "chat template: line 2, column 7: Unexpected end of template. Jinja was looking for "
            "the following tags: "
            "'elif' or 'else' or 'endif'. The innermost block that needs to be closed is 'if'.");
  EXPECT_EQ(error_of("x\n  {% frob %}"),
            "chat template: line 2, column 6: Encountered unknown tag 'frob'.");
  EXPECT_EQ(error_of("{# open"), "chat template: line 1, column 1: Missing end of comment tag");
  EXPECT_EQ(error_of("{{ 'a' ? }}"), "chat template: line 1, column 8: unexpected char '?' at 7");
  EXPECT_EQ(error_of("{% break %}"), "chat template: line 1, column 4: 'break' outside loop");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("ok\n{{ missing.attr }}"), "chat template: line 2: 'missing' is undefined");
  EXPECT_EQ(error_of("{{ 'a' +\n none }}"),
            "chat template: line 1: can only concatenate str (not \"NoneType\") to str");
  EXPECT_EQ(error_of("\n\n{{ x | nosuch }}"), "chat template: line 3: No filter named 'nosuch'.");
  EXPECT_EQ(error_of("{% set l = [] %}{{ l.append(1) }}"),
            "chat template: line 1: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(ChatTemplateErrors, RaiseExceptionIsARequestError) {
  EXPECT_EQ(error_of("{{ raise_exception('Roles must alternate: ' ~ 3) }}"),
            "raise: Roles must alternate: 3");
  try {
    render("{% if true %}{{ raise_exception('bad') }}{% endif %}");
    FAIL() << "no exception";
  } catch (const hearth::Error& e) {  // the server catches hearth::Error
    EXPECT_NE(dynamic_cast<const TemplateRaise*>(&e), nullptr);
    EXPECT_STREQ(e.what(), "bad");
  }
}

TEST(ChatTemplateHostile, EndInErrorsNotCrashes) {
  EXPECT_NE(error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}")
                .find("maximum recursion depth exceeded"),
            std::string::npos);
  RenderOptions small;
  small.max_steps = 200000;
  EXPECT_NE(
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               nlohmann::ordered_json::object(), small)
          .find("steps"),
      std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}").find("limit"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 10000000000 }}").find("limit"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000) | length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nesting too deep"),
            std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 2000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(error_of(deep_ifs).find("nesting too deep"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self | tojson }}")
                .find("not JSON serializable"),
            std::string::npos);
}

TEST(ChatTemplateContext, BuiltLikeApplyChatTemplate) {
  ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.special_tokens = {{"bos_token", "<s>"}};
  in.kwargs = {{"enable_thinking", false}, {"bos_token", "<B>"}};
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{{ tools is none }}{{ documents is defined }}{{ add_generation_prompt }}{{ "
      "enable_thinking }}"
      "{{ messages[0].content }}");
  EXPECT_EQ(render_chat(t, in), "<B>TrueTrueTrueFalsehi");
  in.messages = nlohmann::ordered_json::array();
  EXPECT_THROW(render_chat(t, in), TemplateError);
}

}  // namespace
}  // namespace hearth::chat

namespace hearth::chat {
namespace {

// Python str over UTF-8 keeps every byte: valid text of 1-4-byte characters and invalid bytes
// (a lone continuation byte, a truncated sequence, an overlong form, 0xFF) decode to code points
// (invalid ones into U+DC80..U+DCFF) and encode back to the same bytes.
TEST(PyStr, Utf8RoundTripsValidAndInvalidBytes) {
  for (const std::string& s : {std::string("a\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80z"),
                               std::string("\x80x\xe6\xbc"), std::string("\xc0\xafq\xff")}) {
    const std::u32string cps = utf8_decode(s);
    EXPECT_EQ(utf8_encode(cps), s);
  }
  EXPECT_EQ(utf8_decode("\xff").front(), char32_t(0xDCFF));
  EXPECT_EQ(utf8_length("a\xc3\xa9\xf0\x9f\x98\x80"), 3u);
}

// A context nested past kMaxJsonDepth is refused with an error, not walked until the stack
// overflows (a 40 KB request nested 20,000 deep used to kill the server here).
TEST(ChatTemplateValues, DeepJsonIsRefusedNotRecursedInto) {
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 20000; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  nlohmann::ordered_json ctx = {{"t", std::move(deep)}};
  try {
    render("{{ t }}", ctx);
    FAIL() << "a 20,000-deep context rendered";
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deeper than 128"), std::string::npos) << e.what();
  }
  nlohmann::ordered_json ok = 1;
  for (int i = 0; i < hearth::kMaxJsonDepth; ++i) ok = nlohmann::ordered_json::array({ok});
  EXPECT_NO_THROW(render("{{ t | length }}", {{"t", ok}}));
}

TEST(ChatTemplateValues, ToJsonOfASelfBuiltDeepValueIsAnError) {
  // The template nests a list 300 deep by itself; tojson must fail cleanly.
  EXPECT_THROW(render("{% set ns = namespace(v=[]) %}{% for i in range(300) %}{% set ns.v = "
                      "[ns.v] %}{% endfor %}{{ ns.v | tojson }}"),
               hearth::Error);
}

TEST(JsonBounded, DepthLimitAndValidity) {
  nlohmann::json out;
  std::string deep(20000, '[');
  deep += std::string(20000, ']');
  EXPECT_EQ(hearth::parse_json_bounded(deep, out), hearth::JsonParseStatus::TooDeep);
  EXPECT_TRUE(out.is_discarded());
  std::string at_limit =
      std::string(hearth::kMaxJsonDepth, '[') + std::string(hearth::kMaxJsonDepth, ']');
  EXPECT_EQ(hearth::parse_json_bounded(at_limit, out), hearth::JsonParseStatus::Ok);
  std::string over = "[" + at_limit + "]";
  EXPECT_EQ(hearth::parse_json_bounded(over, out), hearth::JsonParseStatus::TooDeep);
  EXPECT_EQ(hearth::parse_json_bounded("{\"a\": [1, {\"b\": null}]}", out),
            hearth::JsonParseStatus::Ok);
  EXPECT_EQ(out["a"][1]["b"], nullptr);
  EXPECT_EQ(hearth::parse_json_bounded("{\"a\": ", out), hearth::JsonParseStatus::Invalid);
  EXPECT_EQ(hearth::parse_json_bounded("", out), hearth::JsonParseStatus::Invalid);
}

}  // namespace
}  // namespace hearth::chat
