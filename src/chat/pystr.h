// Python str semantics over UTF-8 std::string, for the chat-template engine: templates index,
// slice, strip and split strings by code point and with Python's notion of whitespace, and print
// floats as Python's repr does. Invariant: inputs are valid UTF-8 (they come from JSON or from
// the template source); invalid bytes are treated as single code points, never read past the end.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

// Decodes one code point at s[i]; advances i. Invalid bytes decode as themselves (0x80..0xFF).
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);  // code points

// str.isspace(): ASCII whitespace, 0x1c-0x1f, NEL, NBSP and the Unicode space separators.
bool py_isspace(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isalnum(char32_t cp);
bool py_isprintable(char32_t cp);
bool py_islower_cp(char32_t cp);
bool py_isupper_cp(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);  // str.title()
std::string py_swapcase(std::string_view s);

// strip family: chars == nullopt means whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends = false);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
// find/count in code point indices; -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);
int64_t py_count(std::string_view s, std::string_view sub);

// Python float repr (shortest round-trip; 1e+16 style exponents; "1.0" for integral values).
std::string py_float_repr(double d);
// Python's built-in round(x, ndigits) for floats (correctly rounded, ties to even on exact ties).
double py_round(double x, int64_t ndigits);

// Python repr() of a str: quotes chosen as Python does, escapes for non-printables.
std::string py_str_repr(std::string_view s);
// json.dumps of a str (ensure_ascii controls \uXXXX escaping of non-ASCII).
void json_quote(std::string& out, std::string_view s, bool ensure_ascii);

// Decodes a Jinja string literal body the way `.encode("ascii","backslashreplace")
// .decode("unicode-escape")` does. Returns an error message on a malformed escape.
std::optional<std::string> py_unescape(std::string_view body, std::string& out);

}  // namespace hearth::chat
