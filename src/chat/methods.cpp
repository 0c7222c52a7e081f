// Methods templates call on values: str (strip, split, startswith, format, ...), dict (items,
// keys, values, get) and list (index, count). Python semantics, code-point indices. Mutating
// methods are refused as transformers' ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <cstdio>
#include <set>

#include "chat/builtins.h"
#include "chat/evaluator.h"
#include "chat/pystr.h"

namespace hearth::chat {
namespace {

const std::set<std::string_view> kStrMethods = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
const std::set<std::string_view> kDictMethods = {"clear",      "copy",   "fromkeys", "get",
                                                 "items",      "keys",   "pop",      "popitem",
                                                 "setdefault", "update", "values"};
const std::set<std::string_view> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
const std::set<std::string_view> kListMethods = {"append", "clear",   "copy",   "count",
                                                 "extend", "index",   "insert", "pop",
                                                 "remove", "reverse", "sort"};
const std::set<std::string_view> kListUnsafe = {"append", "clear",  "extend",  "insert",
                                                "pop",    "remove", "reverse", "sort"};

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return arg_str(v, what);
}

// [start, end) of a str method's optional slice arguments, as byte offsets.
std::string_view sliced(const std::string& s, const CallArgs& a, size_t first) {
  if (a.pos.size() <= first) return s;
  std::u32string u = utf8_decode(s);
  auto n = static_cast<int64_t>(u.size());
  auto norm = [n](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
  int64_t b = a.pos[first].is_none() ? 0 : norm(arg_int(a.pos[first], "slice index"));
  int64_t e = a.pos.size() > first + 1 && !a.pos[first + 1].is_none()
                  ? norm(arg_int(a.pos[first + 1], "slice index"))
                  : n;
  if (e < b) e = b;
  size_t bb = utf8_encode(std::u32string_view(u).substr(0, static_cast<size_t>(b))).size();
  size_t eb = utf8_encode(std::u32string_view(u).substr(0, static_cast<size_t>(e))).size();
  return std::string_view(s).substr(bb, eb - bb);
}

bool affix_match(const std::string& s, const CallArgs& a, bool prefix) {
  if (a.pos.empty())
    runtime_fail(std::string(prefix ? "startswith" : "endswith") + "() takes at least 1 argument");
  std::string_view part = sliced(s, a, 1);
  auto one = [&](const Value& v) {
    std::string x = arg_str(v, prefix ? "startswith first arg" : "endswith first arg");
    return prefix ? part.substr(0, x.size()) == x
                  : (part.size() >= x.size() && part.substr(part.size() - x.size()) == x);
  };
  if (a.pos[0].kind() == Value::Kind::Tuple) {
    return std::any_of(a.pos[0].items().begin(), a.pos[0].items().end(), one);
  }
  return one(a.pos[0]);
}

std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
  auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  int64_t total = width - len, left = 0;
  if (align == '>') left = total;
  if (align == '^') left = total / 2 + (total & width & 1);  // CPython's str.center
  std::string out;
  for (int64_t i = 0; i < left; ++i) utf8_append(out, fill);
  out += s;
  for (int64_t i = 0; i < total - left; ++i) utf8_append(out, fill);
  return out;
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    if (!pred(utf8_next(s, i))) return false;
  }
  return true;
}

// str.format with positional/keyword fields and a basic format spec.
std::string format_field(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  size_t i = 0;
  char32_t fill = ' ';
  char align = 0;
  std::u32string u = utf8_decode(spec);
  if (u.size() >= 2 && (u[1] == '<' || u[1] == '>' || u[1] == '^')) {
    fill = u[0];
    align = static_cast<char>(u[1]);
    i = 2;
  } else if (!u.empty() && (u[0] == '<' || u[0] == '>' || u[0] == '^')) {
    align = static_cast<char>(u[0]);
    i = 1;
  }
  std::string rest = utf8_encode(std::u32string_view(u).substr(i));
  std::string sign, width, precision;
  size_t k = 0;
  if (k < rest.size() && (rest[k] == '+' || rest[k] == '-' || rest[k] == ' ')) sign = rest[k++];
  while (k < rest.size() && isdigit(static_cast<unsigned char>(rest[k])))
    width.push_back(rest[k++]);
  if (k < rest.size() && rest[k] == '.') {
    ++k;
    while (k < rest.size() && isdigit(static_cast<unsigned char>(rest[k])))
      precision.push_back(rest[k++]);
  }
  char type = k < rest.size() ? rest[k++] : 0;
  if (k != rest.size()) runtime_fail("Invalid format specifier '" + spec + "'");
  std::string body;
  if (type == 0 || type == 's') {
    if (v.is_number() && type == 0 && precision.empty()) {
      body = v.to_str();
      if (!align) align = '>';
    } else {
      body = v.to_str();
      if (!precision.empty())
        body = utf8_encode(utf8_decode(body).substr(0, std::stoul(precision)));
    }
  } else if (type == 'd') {
    if (!v.is_int() && !v.is_bool())
      runtime_fail("Unknown format code 'd' for object of type '" + v.type_name() + "'");
    body = (sign == "+" && v.as_int() >= 0 ? "+" : "") + std::to_string(v.as_int());
    if (!align) align = '>';
  } else if (std::string_view("fFeEgG%").find(type) != std::string_view::npos) {
    if (!v.is_number())
      runtime_fail(
          fmt::format("Unknown format code '{}' for object of type '{}'", type, v.type_name()));
    char buf[512];
    double x = v.as_double() * (type == '%' ? 100 : 1);
    std::string f =
        "%" + sign + "." + (precision.empty() ? "6" : precision) + (type == '%' ? 'f' : type);
    std::snprintf(buf, sizeof buf, f.c_str(), x);
    body = std::string(buf) + (type == '%' ? "%" : "");
    if (!align) align = '>';
  } else {
    runtime_fail(fmt::format("Unknown format code '{}'", type));
  }
  return pad(body, width.empty() ? 0 : std::stoll(width), fill, align ? align : '<');
}

std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        runtime_fail("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) runtime_fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1), spec;
    bool use_repr = false;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      use_repr = field.substr(bang + 1) == "r";
      field.resize(bang);
    }
    Value v;
    if (field.empty() || isdigit(static_cast<unsigned char>(field[0]))) {
      size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= a.pos.size())
        runtime_fail("Replacement index " + std::to_string(idx) +
                     " out of range for positional args tuple");
      v = a.pos[idx];
    } else {
      const Value* kv = a.kwarg(field);
      if (!kv) runtime_fail("KeyError: '" + field + "'");
      v = *kv;
    }
    out += use_repr ? v.repr() : format_field(v, spec);
    i = close;
  }
  return out;
}

ValueList strings_to_list(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& p : parts) out.emplace_back(p);
  return out;
}

Value call_str_method(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = opt_str(a.get(0, "chars"), "strip arg");
    return Value(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str(a.get(0, "sep"), "separator");
    if (sep && sep->empty()) runtime_fail("empty separator");
    Value m = a.get(1, "maxsplit", Value(int64_t{-1}));
    int64_t maxsplit = arg_int(m, "maxsplit");
    return Value::list(strings_to_list(name == "split" ? py_split(s, sep, maxsplit)
                                                       : py_rsplit(s, sep, maxsplit)));
  }
  if (name == "splitlines")
    return Value::list(
        strings_to_list(py_splitlines(s, a.get(0, "keepends", Value(false)).truthy())));
  if (name == "startswith") return Value(affix_match(s, a, true));
  if (name == "endswith") return Value(affix_match(s, a, false));
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower" || name == "casefold") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "swapcase") return Value(py_swapcase(s));
  if (name == "replace") {
    std::string old = arg_str(a.get(0, "old"), "replace() argument 1");
    std::string repl = arg_str(a.get(1, "new"), "replace() argument 2");
    int64_t count = arg_int(a.get(2, "count", Value(int64_t{-1})), "count");
    return Value(py_replace(s, old, repl, count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    std::string sub = arg_str(a.get(0, "sub"), "must be str");
    std::string_view part = sliced(s, a, 1);
    int64_t r = py_find(part, sub, name[0] == 'r');
    if (r >= 0 && a.pos.size() > 1 && !a.pos[1].is_none()) {
      r += static_cast<int64_t>(
          utf8_length(std::string_view(s).substr(0, static_cast<size_t>(part.data() - s.data()))));
    }
    if (r < 0 && (name == "index" || name == "rindex")) runtime_fail("substring not found");
    return Value(r);
  }
  if (name == "count")
    return Value(py_count(sliced(s, a, 1), arg_str(a.get(0, "sub"), "must be str")));
  if (name == "join") {
    std::string out;
    size_t i = 0;
    for (const Value& v : value_iterate(a.get(0, "iterable"))) {
      if (!v.is_string())
        runtime_fail("sequence item " + std::to_string(i) + ": expected str instance, " +
                     v.type_name() + " found");
      if (i++) out += s;
      out += v.str();
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(s, a));
  if (name == "zfill") {
    int64_t w = arg_int(a.get(0, "width"), "width");
    auto len = static_cast<int64_t>(utf8_length(s));
    if (w <= len) return Value(s);
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(w - len), '0') +
                 s.substr(sign));
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    int64_t w = arg_int(a.get(0, "width"), "width");
    std::string fill = arg_str(a.get(1, "fillchar", Value(" ")), "fillchar");
    if (utf8_length(fill) != 1)
      runtime_fail("The fill character must be exactly one character long");
    size_t i = 0;
    return Value(pad(s, w, utf8_next(fill, i),
                     name == "ljust"   ? '<'
                     : name == "rjust" ? '>'
                                       : '^'));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = arg_str(a.get(0, "affix"), "argument");
    if (name == "removeprefix") return Value(s.rfind(x, 0) == 0 ? s.substr(x.size()) : s);
    bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value(ends && !x.empty() ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = arg_str(a.get(0, "sep"), "separator");
    if (sep.empty()) runtime_fail("empty separator");
    size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos) {
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                                 : Value::tuple({Value(""), Value(""), Value(s)});
    }
    return Value::tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value(all_chars(s, py_isdigit));
  if (name == "isalpha") return Value(all_chars(s, py_isalpha));
  if (name == "isalnum") return Value(all_chars(s, py_isalnum));
  if (name == "isspace") return Value(all_chars(s, py_isspace));
  if (name == "isascii")
    return Value(std::all_of(s.begin(), s.end(),
                             [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (size_t i = 0; i < s.size();) {
      char32_t c = utf8_next(s, i);
      if (name == "islower" ? py_isupper_cp(c) : py_islower_cp(c)) return Value(false);
      cased = cased || (name == "islower" ? py_islower_cp(c) : py_isupper_cp(c));
    }
    return Value(cased);
  }
  runtime_fail("str." + name + "() is not supported in chat templates");
}

Value call_dict_method(const Value& d, const std::string& name, CallArgs& a) {
  if (name == "items") {
    ValueList out;
    for (const auto& [k, v] : d.dict().entries) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : d.dict().entries) out.push_back(name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    if (a.pos.empty()) runtime_fail("get expected at least 1 argument, got 0");
    const Value* v = d.dict().find(a.pos[0]);
    return v ? *v : (a.pos.size() > 1 ? a.pos[1] : Value::none());
  }
  if (name == "copy") return d;
  runtime_fail("dict." + name + "() is not supported in chat templates");
}

Value call_list_method(const Value& l, const std::string& name, CallArgs& a) {
  const ValueList& items = l.items();
  if (name == "count") {
    Value x = a.get(0, "value");
    return Value(static_cast<int64_t>(std::count_if(
        items.begin(), items.end(), [&](const Value& v) { return values_equal(v, x); })));
  }
  if (name == "index") {
    Value x = a.get(0, "value");
    for (size_t i = 0; i < items.size(); ++i) {
      if (values_equal(items[i], x)) return Value(static_cast<int64_t>(i));
    }
    runtime_fail(x.repr() + " is not in list");
  }
  if (name == "copy") return Value::list(items);
  runtime_fail(l.type_name() + "." + name + "() is not supported in chat templates");
}

}  // namespace

bool has_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::String:
      return kStrMethods.count(name) != 0;
    case Value::Kind::Dict:
      return kDictMethods.count(name) != 0;
    case Value::Kind::List:
      return kListMethods.count(name) != 0;
    case Value::Kind::Tuple:
      return name == "count" || name == "index";
    default:
      return false;
  }
}

Value find_method(const Value& obj, const std::string& name) {
  if (!has_method(obj, name))
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  if ((obj.is_dict() && kDictUnsafe.count(name)) ||
      (obj.kind() == Value::Kind::List && kListUnsafe.count(name))) {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                            "' object is unsafe.");
  }
  return make_function(name, [obj, name](Evaluator&, CallArgs& a) -> Value {
    if (obj.is_string()) return call_str_method(obj.str(), name, a);
    if (obj.is_dict()) return call_dict_method(obj, name, a);
    return call_list_method(obj, name, a);
  });
}

}  // namespace hearth::chat
