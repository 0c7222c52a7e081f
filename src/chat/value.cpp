// Value semantics as Python/Jinja2 define them: str()/repr() printing, truthiness, equality,
// ordering, len(), iteration, and the JSON bridge (json.dumps byte for byte).
#include "chat/value.h"

#include <algorithm>
#include <cmath>

#include "chat/pystr.h"
#include "core/error.h"
#include "core/json_bounded.h"

namespace hearth::chat {

void runtime_fail(std::string message) { throw RuntimeFailure{std::move(message)}; }

Value Value::undefined(std::string hint) {
  Value v(Kind::Undefined);
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value::Value(std::string s)
    : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(ValueList items) {
  Value v(Kind::List);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v(Kind::Tuple);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::dict(ValueDict d) {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<const ValueDict>(std::move(d));
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v(Kind::Object);
  v.obj_ = std::move(o);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !s_->empty();
    case Kind::List:
    case Kind::Tuple:
      return !list_->empty();
    case Kind::Dict:
      return dict_->size() != 0;
    case Kind::Object:
      return true;
  }
  return false;
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return *s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return i_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return py_float_repr(f_);
    case Kind::String:
      return py_str_repr(*s_);
    case Kind::List:
    case Kind::Tuple: {
      bool tuple = kind_ == Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple && list_->size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::Object:
      return obj_->repr();
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return "dict";
    case Kind::Object:
      return obj_->type_name();
  }
  return "object";
}

const Value* ValueDict::find(const Value& key) const {
  for (const auto& e : entries) {
    if (values_equal(e.first, key)) return &e.second;
  }
  return nullptr;
}

const Value* ValueDict::find(const std::string& key) const {
  for (const auto& e : entries) {
    if (e.first.is_string() && e.first.str() == key) return &e.second;
  }
  return nullptr;
}

void ValueDict::set(const Value& key, Value value) {
  for (auto& e : entries) {
    if (values_equal(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

const Value* CallArgs::kwarg(const std::string& name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value CallArgs::get(size_t index, const std::string& name, Value fallback) const {
  if (index < pos.size()) return pos[index];
  if (const Value* v = kwarg(name)) return *v;
  return fallback;
}

Value Object::get_attr(const std::string& name) const {
  return Value::undefined("'" + type_name() + " object' has no attribute '" + name + "'");
}

Value Object::call(Evaluator&, CallArgs&) {
  runtime_fail("'" + type_name() + "' object is not callable");
}

Value make_function(std::string name, Function::Fn fn) {
  return Value::object(std::make_shared<Function>(std::move(name), std::move(fn)));
}

Value Namespace::get_attr(const std::string& name) const {
  if (const Value* v = attrs.find(name)) return *v;
  return Object::get_attr(name);
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None:
      return true;
    case K::String:
      return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case K::Dict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* o = b.dict().find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case K::Object:
      return a.obj() == b.obj();
    default:
      return false;
  }
}

int values_compare(const Value& a, const Value& b) {
  if (a.is_undefined()) runtime_fail(a.str());
  if (b.is_undefined()) runtime_fail(b.str());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == b.kind() && a.is_sequence_like()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return values_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  runtime_fail("'<' not supported between instances of '" + a.type_name() + "' and '" +
               b.type_name() + "'");
}

int64_t value_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict:
      return static_cast<int64_t>(v.dict().size());
    default:
      runtime_fail("object of type '" + v.type_name() + "' has no len()");
  }
}

ValueList value_iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return v.items();
    case Value::Kind::Dict: {
      ValueList keys;
      for (const auto& e : v.dict().entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        utf8_next(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default:
      runtime_fail("'" + v.type_name() + "' object is not iterable");
  }
}

Value value_from_json(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > kMaxJsonDepth)
    fail("chat template input: JSON nested deeper than {} levels", kMaxJsonDepth);
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value(j.get<bool>());
    case T::number_integer:
      return Value(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value(j.get<double>());
    case T::string:
      return Value(j.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      ValueDict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.entries.emplace_back(Value(it.key()), value_from_json(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

static std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

static void dump_json(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  using K = Value::Kind;
  // Values a template builds itself (a list appended to itself in a loop) can nest without a
  // bound; Python raises RecursionError here, we refuse before the stack runs out.
  if (level > kMaxJsonDepth)
    runtime_fail(fmt::format("tojson: value nested deeper than {} levels", kMaxJsonDepth));
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case K::None:
      out += "null";
      return;
    case K::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case K::Int:
      out += std::to_string(v.as_int());
      return;
    case K::Float:
      out += json_float(v.as_double());
      return;
    case K::String:
      json_quote(out, v.str(), o.ensure_ascii);
      return;
    case K::List:
    case K::Tuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const Value& e : v.items()) {
        if (!first) out += o.item_sep;
        first = false;
        if (o.indent) newline(level + 1);
        dump_json(out, e, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case K::Dict: {
      if (v.dict().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return values_compare(a->first, b->first) < 0; });
      }
      out.push_back('{');
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += o.item_sep;
        first = false;
        if (o.indent) newline(level + 1);
        const Value& k = e->first;
        if (k.is_string()) {
          json_quote(out, k.str(), o.ensure_ascii);
        } else if (k.is_bool() || k.is_none()) {
          out += k.is_none() ? "\"null\"" : k.as_bool() ? "\"true\"" : "\"false\"";
        } else if (k.is_int()) {
          out += "\"" + std::to_string(k.as_int()) + "\"";
        } else if (k.is_float()) {
          out += "\"" + json_float(k.as_double()) + "\"";
        } else {
          runtime_fail("keys must be str, int, float, bool or None, not " + k.type_name());
        }
        out += o.key_sep;
        dump_json(out, e->second, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      runtime_fail("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

std::string value_to_json(const Value& v, const JsonDumpOptions& opts) {
  std::string out;
  dump_json(out, v, opts, 0);
  return out;
}

}  // namespace hearth::chat
