// Tests, globals, str/dict/list methods and printf-style formatting for templates (see
// builtins.h). Mutating methods (list.append, dict.update, ...) behave as in transformers'
// ImmutableSandboxedEnvironment: the attribute is an undefined value, and calling it fails.
#include "chat/builtins.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <unordered_map>

#include "chat/evaluator.h"
#include "chat/pystr.h"
#include "chat/template.h"

namespace hearth::chat {

int64_t arg_int(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  runtime_fail(std::string(what) + " must be an integer, not " + v.type_name());
}

std::string arg_str(const Value& v, const char* what) {
  if (v.is_string()) return v.str();
  runtime_fail(std::string(what) + " must be a string, not " + v.type_name());
}

// ---------------------------------------------------------------- tests

namespace {

bool test_defined(Evaluator&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool test_undefined(Evaluator&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool test_none(Evaluator&, const Value& v, CallArgs&) { return v.is_none(); }
bool test_boolean(Evaluator&, const Value& v, CallArgs&) { return v.is_bool(); }
bool test_true(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool test_false(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool test_integer(Evaluator&, const Value& v, CallArgs&) { return v.is_int(); }
bool test_float(Evaluator&, const Value& v, CallArgs&) { return v.is_float(); }
bool test_number(Evaluator&, const Value& v, CallArgs&) { return v.is_number(); }
bool test_string(Evaluator&, const Value& v, CallArgs&) { return v.is_string(); }
bool test_mapping(Evaluator&, const Value& v, CallArgs&) { return v.is_dict(); }
bool test_iterable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence_like() || v.is_dict();
}
bool test_sequence(Evaluator& ev, const Value& v, CallArgs& a) { return test_iterable(ev, v, a); }
bool test_callable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_undefined() || (v.is_object() && v.obj()->callable());
}
bool test_escaped(Evaluator&, const Value&, CallArgs&) { return false; }

Value arg0(CallArgs& a, const char* test) {
  if (a.pos.empty()) runtime_fail(std::string(test) + "() missing 1 required positional argument");
  return a.pos[0];
}

bool test_odd(Evaluator&, const Value& v, CallArgs&) {
  return values_equal(binary_op("%", v, Value(int64_t{2}), 1 << 20), Value(int64_t{1}));
}
bool test_even(Evaluator&, const Value& v, CallArgs&) {
  return values_equal(binary_op("%", v, Value(int64_t{2}), 1 << 20), Value(int64_t{0}));
}
bool test_divisibleby(Evaluator&, const Value& v, CallArgs& a) {
  return values_equal(binary_op("%", v, arg0(a, "divisibleby"), 1 << 20), Value(int64_t{0}));
}
bool test_eq(Evaluator&, const Value& v, CallArgs& a) { return values_equal(v, arg0(a, "eq")); }
bool test_ne(Evaluator&, const Value& v, CallArgs& a) { return !values_equal(v, arg0(a, "ne")); }
bool test_lt(Evaluator&, const Value& v, CallArgs& a) {
  return values_compare(v, arg0(a, "lt")) < 0;
}
bool test_le(Evaluator&, const Value& v, CallArgs& a) {
  return values_compare(v, arg0(a, "le")) <= 0;
}
bool test_gt(Evaluator&, const Value& v, CallArgs& a) {
  return values_compare(v, arg0(a, "gt")) > 0;
}
bool test_ge(Evaluator&, const Value& v, CallArgs& a) {
  return values_compare(v, arg0(a, "ge")) >= 0;
}
bool test_in(Evaluator&, const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool test_sameas(Evaluator&, const Value& v, CallArgs& a) {
  Value o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool() || v.is_int()) return v.as_int() == o.as_int();
  return values_equal(v, o) && (v.is_string() ? &v.str() == &o.str() : true);
}
bool test_lower(Evaluator&, const Value& v, CallArgs&) {
  std::string s = v.to_str();
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    if (py_isupper_cp(c)) return false;
    cased = cased || py_islower_cp(c);
  }
  return cased;
}
bool test_upper(Evaluator&, const Value& v, CallArgs&) {
  std::string s = v.to_str();
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    if (py_islower_cp(c)) return false;
    cased = cased || py_isupper_cp(c);
  }
  return cased;
}
bool test_filter(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str());
}
bool test_test(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.str());
}

}  // namespace

TestFn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> tests = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"integer", test_integer},
      {"float", test_float},
      {"number", test_number},
      {"string", test_string},
      {"mapping", test_mapping},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"callable", test_callable},
      {"escaped", test_escaped},
      {"odd", test_odd},
      {"even", test_even},
      {"divisibleby", test_divisibleby},
      {"eq", test_eq},
      {"equalto", test_eq},
      {"==", test_eq},
      {"ne", test_ne},
      {"!=", test_ne},
      {"lt", test_lt},
      {"lessthan", test_lt},
      {"<", test_lt},
      {"le", test_le},
      {"<=", test_le},
      {"gt", test_gt},
      {"greaterthan", test_gt},
      {">", test_gt},
      {"ge", test_ge},
      {">=", test_ge},
      {"in", test_in},
      {"sameas", test_sameas},
      {"lower", test_lower},
      {"upper", test_upper},
      {"filter", test_filter},
      {"test", test_test},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------- globals

namespace {

ValueDict dict_from_args(CallArgs& a, const char* what) {
  ValueDict d;
  if (a.pos.size() > 1) runtime_fail(std::string(what) + " expected at most 1 positional argument");
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      d = src.dict();
    } else if (src.is_object() && dynamic_cast<Namespace*>(src.obj().get())) {
      d = dynamic_cast<Namespace*>(src.obj().get())->attrs;
    } else {
      for (const Value& pair : value_iterate(src)) {
        ValueList kv = value_iterate(pair);
        if (kv.size() != 2)
          runtime_fail("dictionary update sequence element has length " +
                       std::to_string(kv.size()) + "; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value(k), v);
  return d;
}

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(ValueList items) : items_(std::move(items)) {}
  size_t pos = 0;
  std::string type_name() const override { return "Cycler"; }
  Value get_attr(const std::string& name) const override;
  const ValueList& items() const { return items_; }

 private:
  ValueList items_;
};

Value Cycler::get_attr(const std::string& name) const {
  auto me = std::const_pointer_cast<Cycler>(shared_from_this());
  if (name == "current") return items_[pos];
  if (name == "next") {
    return make_function("next", [me](Evaluator&, CallArgs&) -> Value {
      Value v = me->items_[me->pos];
      me->pos = (me->pos + 1) % me->items_.size();
      return v;
    });
  }
  if (name == "reset") {
    return make_function("reset", [me](Evaluator&, CallArgs&) -> Value {
      me->pos = 0;
      return Value::none();
    });
  }
  return Object::get_attr(name);
}

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Evaluator&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value(std::string());
    }
    return Value(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

Value global_range(Evaluator& ev, CallArgs& a) {
  if (a.pos.empty() || a.pos.size() > 3) runtime_fail("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = arg_int(a.pos[0], "range() argument");
  } else {
    start = arg_int(a.pos[0], "range() argument");
    stop = arg_int(a.pos[1], "range() argument");
    if (a.pos.size() == 3) step = arg_int(a.pos[2], "range() argument");
  }
  if (step == 0) runtime_fail("range() arg 3 must not be zero");
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (n > 100000)
    runtime_fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
  ev.step();
  return Value::list(std::move(out));
}

Value global_strftime_now(Evaluator& ev, CallArgs& a) {
  std::string fmt = arg_str(a.get(0, "format"), "strftime_now() format");
  std::time_t t = ev.now();
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string buf(256 + fmt.size() * 8, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

Value find_global(const std::string& name) {
  if (name == "range") return make_function("range", global_range);
  if (name == "dict") {
    return make_function(
        "dict", [](Evaluator&, CallArgs& a) { return Value::dict(dict_from_args(a, "dict")); });
  }
  if (name == "namespace") {
    return make_function("namespace", [](Evaluator& ev, CallArgs& a) {
      auto ns = std::make_shared<Namespace>();
      ev.track(ns);
      ns->attrs = dict_from_args(a, "namespace");
      return Value::object(ns);
    });
  }
  if (name == "cycler") {
    return make_function("cycler", [](Evaluator&, CallArgs& a) {
      if (a.pos.empty()) runtime_fail("at least one item has to be provided");
      return Value::object(std::make_shared<Cycler>(a.pos));
    });
  }
  if (name == "joiner") {
    return make_function("joiner", [](Evaluator&, CallArgs& a) {
      return Value::object(std::make_shared<Joiner>(a.get(0, "sep", Value(", ")).to_str()));
    });
  }
  if (name == "raise_exception") {
    return make_function("raise_exception", [](Evaluator&, CallArgs& a) -> Value {
      throw TemplateRaise(a.get(0, "message").to_str());
    });
  }
  if (name == "strftime_now") return make_function("strftime_now", global_strftime_now);
  return Value::undefined("'" + name + "' is undefined");
}

// ---------------------------------------------------------------- printf-style formatting

std::string percent_format(const std::string& fmt, const Value& args) {
  ValueList positional;
  const ValueDict* mapping = nullptr;
  if (args.kind() == Value::Kind::Tuple) {
    positional = args.items();
  } else {
    if (args.is_dict()) mapping = &args.dict();
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> Value {
    if (next >= positional.size()) runtime_fail("not enough arguments for format string");
    return positional[next++];
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) runtime_fail("incomplete format");
    std::optional<Value> value;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) runtime_fail("incomplete format key");
      if (!mapping) runtime_fail("format requires a mapping");
      const Value* v = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!v) runtime_fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      value = *v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      flags.push_back(fmt[i++]);
    std::string width, precision;
    while (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i]))) width.push_back(fmt[i++]);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = "0";
      std::string p;
      while (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i]))) p.push_back(fmt[i++]);
      if (!p.empty()) precision = p;
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) runtime_fail("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    Value v = value ? *value : take();
    std::string spec = "%" + flags + width + (precision.empty() ? "" : "." + precision);
    char buf[512];
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? v.to_str() : v.repr();
        if (!precision.empty()) {
          std::u32string u = utf8_decode(s);
          s = utf8_encode(std::u32string_view(u).substr(0, std::stoul(precision)));
        }
        size_t len = utf8_length(s), w = width.empty() ? 0 : std::stoul(width);
        if (len < w) {
          std::string pad(w - len, ' ');
          s = flags.find('-') != std::string::npos ? s + pad : pad + s;
        }
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number())
          runtime_fail("%" + std::string(1, conv) + " format: a number is required, not " +
                       v.type_name());
        int64_t n = v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof buf, (spec + "ll" + c).c_str(), static_cast<long long>(n));
        std::string s = buf;
        if (conv == 'o' && flags.find('#') != std::string::npos) {  // Python writes 0o, C writes 0
          size_t z = s.find('0');
          if (z != std::string::npos) s.insert(z + 1, "o");
        }
        out += s;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!v.is_number()) runtime_fail("must be real number, not " + v.type_name());
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      case 'c':
        if (v.is_string() && utf8_length(v.str()) == 1) {
          out += v.str();
        } else if (v.is_int()) {
          utf8_append(out, static_cast<char32_t>(v.as_int()));
        } else {
          runtime_fail("%c requires int or char");
        }
        break;
      default:
        runtime_fail(fmt::format("unsupported format character '{}'", conv));
    }
  }
  if (!used_mapping && next < positional.size() &&
      !(mapping && positional.size() == 1 && next == 0)) {
    runtime_fail("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace hearth::chat
