// Jinja2's built-in filters as chat templates use them (jinja2/filters.py, 3.1), plus
// transformers' `tojson` override: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) — no HTML escaping, Python's separators. Filters that
// return generators in Jinja (map, select, unique, reverse) return lists here; they print
// differently only when printed raw, which real templates never do.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/evaluator.h"
#include "chat/pystr.h"

namespace hearth::chat {
namespace {

Value make_list(ValueList v) { return Value::list(std::move(v)); }

// make_attrgetter: "a.b.0" walks items/attributes; `default` replaces undefined results.
Value get_attribute_path(Evaluator& ev, const Value& item, const Value& attribute,
                         const Value& dflt = Value()) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const auto& p : py_split(attribute.str(), std::string("."), -1)) {
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) {
        return isdigit(static_cast<unsigned char>(c));
      });
      parts.push_back(digits ? Value(static_cast<int64_t>(std::stoll(p))) : Value(p));
    }
  } else {
    parts.push_back(attribute);
  }
  Value v = item;
  for (const Value& p : parts) {
    v = ev.get_item(v, p);
    if (!dflt.is_undefined() && !dflt.is_none() && v.is_undefined()) v = dflt;
  }
  return v;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str())) : v; }

Value sort_key(Evaluator& ev, const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_undefined() || attribute.is_none()
                ? item
                : get_attribute_path(ev, item, attribute);
  return case_sensitive ? k : ignore_case(k);
}

Value f_abs(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return v.as_int() < 0 ? negate(v) : Value(v.as_int());
  runtime_fail("bad operand type for abs(): '" + v.type_name() + "'");
}

// attr() is Python getattr only: a dict key is not an attribute.
Value f_attr(Evaluator&, const Value& v, CallArgs& a) {
  std::string name = a.get(0, "name").to_str();
  if (v.is_object()) return v.obj()->get_attr(name);
  if (has_method(v, name)) return find_method(v, name);
  return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
}

Value f_batch(Evaluator&, const Value& v, CallArgs& a) {
  int64_t n = arg_int(a.get(0, "linecount"), "linecount");
  if (n <= 0) runtime_fail("linecount must be positive");
  Value fill = a.get(1, "fill_with", Value::none());
  ValueList out, tmp;
  for (const Value& item : value_iterate(v)) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(make_list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(fill);
    }
    out.push_back(make_list(std::move(tmp)));
  }
  return make_list(std::move(out));
}

Value f_capitalize(Evaluator&, const Value& v, CallArgs&) {
  return Value(py_capitalize(v.to_str()));
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& a) {
  CallArgs inner;
  inner.pos.push_back(a.get(0, "width", Value(int64_t{80})));
  return ev.call(find_method(Value(v.to_str()), "center"), inner);
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default_value", Value(""));
  bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
  return v;
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& a) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  std::string by = a.get(1, "by", Value("key")).to_str();
  bool reverse = a.get(2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value")
    runtime_fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) runtime_fail("dictsort requires a mapping");
  size_t pos = by == "key" ? 0 : 1;
  ValueList items;
  for (const auto& [k, x] : v.dict().entries) items.push_back(Value::tuple({k, x}));
  auto key = [&](const Value& t) {
    return case_sensitive ? t.items()[pos] : ignore_case(t.items()[pos]);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? values_compare(key(y), key(x)) < 0 : values_compare(key(x), key(y)) < 0;
  });
  return make_list(std::move(items));
}

Value f_escape(Evaluator&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Value f_first(Evaluator&, const Value& v, CallArgs&) {
  ValueList items = value_iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs&) {
  ValueList items = value_iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan words.
std::optional<double> parse_py_float(const std::string& raw) {
  std::string s = py_strip(raw, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    t.push_back(s[i]);
  }
  if (t.empty()) return std::nullopt;
  std::string lower = py_lower(t);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -x : x;
  }
  if (body.empty() || body.find_first_not_of("0123456789.eE+-") != std::string::npos ||
      body.find("0x") == 0)
    return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_py_int(const std::string& raw, int base) {
  std::string s = py_strip(raw, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  std::string lower = py_lower(s.substr(i));
  if (lower.size() > 2 && lower[0] == '0' &&
      ((base == 16 && lower[1] == 'x') || (base == 8 && lower[1] == 'o') ||
       (base == 2 && lower[1] == 'b'))) {
    lower = lower.substr(2);
    if (!lower.empty() && lower[0] == '_') lower = lower.substr(1);
  }
  if (lower.empty() || lower.front() == '_' || lower.back() == '_' ||
      lower.find("__") != std::string::npos)
    return std::nullopt;
  lower.erase(std::remove(lower.begin(), lower.end(), '_'), lower.end());
  for (char c : lower) {
    int d = isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : (c >= 'a' && c <= 'z')               ? c - 'a' + 10
                                                   : 99;
    if (d >= base) return std::nullopt;
  }
  errno = 0;
  long long v = std::strtoll(lower.c_str(), nullptr, base);
  if (errno == ERANGE) runtime_fail("integer too large");
  return neg ? -v : v;
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default", Value(int64_t{0}));
  int base = static_cast<int>(arg_int(a.get(1, "base", Value(int64_t{10})), "base"));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  auto from_double = [&](double d) -> Value {
    if (std::isnan(d)) return dflt;
    if (std::isinf(d)) runtime_fail("cannot convert float infinity to integer");
    return Value(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_double(v.as_double());
  if (v.is_string()) {
    if (auto i = parse_py_int(v.str(), base)) return Value(*i);
    if (auto d = parse_py_float(v.str())) return from_double(*d);
  }
  if (v.is_undefined()) runtime_fail(v.str());
  return dflt;
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.str())) return Value(*d);
  }
  if (v.is_undefined()) runtime_fail(v.str());
  return dflt;
}

Value f_format(Evaluator&, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    runtime_fail("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    ValueDict d;
    for (auto& [k, x] : a.kw) d.set(Value(k), x);
    return Value(percent_format(v.to_str(), Value::dict(std::move(d))));
  }
  return Value(percent_format(v.to_str(), Value::tuple(a.pos)));
}

Value f_indent(Evaluator&, const Value& v, CallArgs& a) {
  Value width = a.get(0, "width", Value(int64_t{4}));
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  std::string indention =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, arg_int(width, "width"))), ' ');
  std::string s =
      v.to_str() + "\n";  // jinja's quirk so that splitlines keeps a trailing blank line
  std::vector<std::string> lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i)
        rv += (i > 1 ? "\n" : "") + (lines[i].empty() ? "" : indention + lines[i]);
    }
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value f_items(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return make_list({});
  if (!v.is_dict()) runtime_fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict().entries) out.push_back(Value::tuple({k, x}));
  return make_list(std::move(out));
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& a) {
  std::string sep = a.get(0, "d", Value("")).to_str();
  Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : value_iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? item : get_attribute_path(ev, item, attribute)).to_str();
    ev.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_length(Evaluator&, const Value& v, CallArgs&) { return Value(value_length(v)); }
Value f_list(Evaluator&, const Value& v, CallArgs&) { return make_list(value_iterate(v)); }
Value f_lower(Evaluator&, const Value& v, CallArgs&) { return Value(py_lower(v.to_str())); }
Value f_upper(Evaluator&, const Value& v, CallArgs&) { return Value(py_upper(v.to_str())); }

Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  ValueList out;
  if (!v.truthy()) return make_list({});
  if (a.pos.empty() && a.kwarg("attribute")) {
    Value attribute = *a.kwarg("attribute");
    Value dflt = a.kwarg("default") ? *a.kwarg("default") : Value::none();
    for (const auto& [k, x] : a.kw) {
      if (k != "attribute" && k != "default")
        runtime_fail("Unexpected keyword argument '" + k + "'");
    }
    for (const Value& item : value_iterate(v))
      out.push_back(get_attribute_path(ev, item, attribute, dflt));
    return make_list(std::move(out));
  }
  if (a.pos.empty()) runtime_fail("map requires a filter argument");
  std::string name = arg_str(a.pos[0], "filter name");
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : value_iterate(v)) {
    CallArgs copy = rest;
    out.push_back(ev.apply_filter(name, item, copy));
  }
  return make_list(std::move(out));
}

Value select_or_reject(Evaluator& ev, const Value& v, CallArgs& a, bool select, bool lookup_attr) {
  ValueList out;
  if (!v.truthy()) return make_list({});
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (a.pos.empty()) runtime_fail("Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs rest;
  if (a.pos.size() > off) {
    test = arg_str(a.pos[off], "test name");
    rest.pos.assign(a.pos.begin() + static_cast<long>(off) + 1, a.pos.end());
    rest.kw = a.kw;
  }
  for (const Value& item : value_iterate(v)) {
    Value x = lookup_attr ? get_attribute_path(ev, item, attribute) : item;
    bool ok;
    if (test) {
      CallArgs copy = rest;
      ok = ev.apply_test(*test, x, copy);
    } else {
      ok = x.truthy();
    }
    if (ok == select) out.push_back(item);
  }
  return make_list(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, true, false);
}
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, false, false);
}
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, true, true);
}
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_or_reject(ev, v, a, false, true);
}

Value min_or_max(Evaluator& ev, const Value& v, CallArgs& a, bool want_max) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  ValueList items = value_iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(ev, items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(ev, items[i], attribute, case_sensitive);
    int c = values_compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_max(Evaluator& ev, const Value& v, CallArgs& a) { return min_or_max(ev, v, a, true); }
Value f_min(Evaluator& ev, const Value& v, CallArgs& a) { return min_or_max(ev, v, a, false); }

Value f_replace(Evaluator&, const Value& v, CallArgs& a) {
  Value count = a.get(2, "count", Value::none());
  return Value(py_replace(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(),
                          count.is_none() ? -1 : arg_int(count, "count")));
}

Value f_reverse(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  ValueList items = value_iterate(v);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  int64_t precision = arg_int(a.get(0, "precision", Value(int64_t{0})), "precision");
  std::string method = a.get(1, "method", Value("common")).to_str();
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_fail("method must be common, ceil or floor");
  if (!v.is_number()) runtime_fail("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // round(int, n >= 0) stays an int
    return Value(py_round(v.as_double(), precision));
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(Evaluator&, const Value& v, CallArgs&) { return Value(v.to_str()); }

Value f_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  bool reverse = a.get(0, "reverse", Value(false)).truthy();
  bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(2, "attribute", Value::none());
  ValueList items = value_iterate(v);
  std::vector<std::string> attrs;
  if (attribute.is_string()) attrs = py_split(attribute.str(), std::string(","), -1);
  auto key = [&](const Value& item) {
    if (attrs.size() <= 1) return sort_key(ev, item, attribute, case_sensitive);
    ValueList parts;
    for (const auto& name : attrs) parts.push_back(sort_key(ev, item, Value(name), case_sensitive));
    return Value::list(std::move(parts));
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) keyed.emplace_back(key(item), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_compare(y.first, x.first) < 0 : values_compare(x.first, y.first) < 0;
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(item);
  return make_list(std::move(out));
}

Value f_string(Evaluator&, const Value& v, CallArgs&) { return Value(v.to_str()); }

Value f_sum(Evaluator& ev, const Value& v, CallArgs& a) {
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(int64_t{0}));
  for (const Value& item : value_iterate(v)) {
    total =
        binary_op("+", total, attribute.is_none() ? item : get_attribute_path(ev, item, attribute),
                  size_t{64} << 20);
  }
  return total;
}

Value f_title(Evaluator&, const Value& v, CallArgs&) {
  // jinja's do_title: split on runs of [-\s({\[<], upper the first char of each piece.
  std::u32string u = utf8_decode(v.to_str()), out;
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  bool start = true;
  for (char32_t c : u) {
    bool sep = is_sep(c);
    std::string one = utf8_encode(std::u32string(1, c));
    std::string mapped = sep ? one : (start ? py_upper(one) : py_lower(one));
    for (char32_t m : utf8_decode(mapped)) out.push_back(m);
    start = sep;
  }
  return Value(utf8_encode(out));
}

Value f_tojson(Evaluator&, const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  Value indent = a.get(1, "indent", Value::none());
  Value separators = a.get(2, "separators", Value::none());
  o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  if (!indent.is_none()) {
    o.indent = indent.is_string()
                   ? indent.str()
                   : std::string(
                         static_cast<size_t>(std::max<int64_t>(0, arg_int(indent, "indent"))), ' ');
    o.item_sep = ",";
  }
  if (!separators.is_none()) {
    ValueList seps = value_iterate(separators);
    if (seps.size() != 2) runtime_fail("separators must be a (item_separator, key_separator) pair");
    o.item_sep = arg_str(seps[0], "item separator");
    o.key_sep = arg_str(seps[1], "key separator");
  }
  return Value(value_to_json(v, o));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  Value chars = a.get(0, "chars", Value::none());
  return Value(py_strip(v.to_str(),
                        chars.is_none() ? std::nullopt : std::optional<std::string>(chars.to_str()),
                        true, true));
}

Value f_truncate(Evaluator&, const Value& v, CallArgs& a) {
  std::u32string s = utf8_decode(v.to_str());
  int64_t length = arg_int(a.get(0, "length", Value(int64_t{255})), "length");
  bool killwords = a.get(1, "killwords", Value(false)).truthy();
  std::string end = a.get(2, "end", Value("...")).to_str();
  Value leeway_v = a.get(3, "leeway", Value::none());
  int64_t leeway = leeway_v.is_none() ? 5 : arg_int(leeway_v, "leeway");
  auto end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len)
    runtime_fail("expected length >= " + std::to_string(end_len) + ", got " +
                 std::to_string(length));
  if (leeway < 0) runtime_fail("expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value(utf8_encode(s));
  std::u32string head = s.substr(0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value(utf8_encode(head) + end);
}

Value f_unique(Evaluator& ev, const Value& v, CallArgs& a) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  ValueList out, seen;
  for (const Value& item : value_iterate(v)) {
    Value k = sort_key(ev, item, attribute, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return values_equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return make_list(std::move(out));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  std::string s = v.to_str();
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> filters = {
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"forceescape", f_escape},
      {"first", f_first},       {"float", f_float},
      {"format", f_format},     {"indent", f_indent},
      {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},
      {"length", f_length},     {"list", f_list},
      {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

}  // namespace hearth::chat
