// Registries of what a template can call by name: filters (`x | name`), tests (`x is name`),
// globals (range, dict, namespace, cycler, joiner, raise_exception, strftime_now) and the
// methods of str, dict and list values. Names and behaviour follow Jinja2 3.1 and Python 3.
#pragma once
#include <string>
#include <string_view>

#include "chat/value.h"

namespace hearth::chat {

using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);
using TestFn = bool (*)(Evaluator&, const Value&, CallArgs&);

FilterFn find_filter(std::string_view name);  // null when unknown
TestFn find_test(std::string_view name);      // null when unknown
Value find_global(const std::string& name);   // undefined when unknown
// A bound method of a str, dict or list (or an undefined value, as the sandbox gives for
// unknown or mutating methods, whose hint says why).
Value find_method(const Value& obj, const std::string& name);
bool has_method(const Value& obj, const std::string& name);

// Python's printf-style `fmt % args`.
std::string percent_format(const std::string& fmt, const Value& args);

// Argument helpers shared by filters and methods.
int64_t arg_int(const Value& v, const char* what);
std::string arg_str(const Value& v, const char* what);

}  // namespace hearth::chat
