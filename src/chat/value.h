// The value model of the chat-template engine: what Jinja2 sees of Python objects. Undefined is
// distinct from None; dicts keep insertion order (as Python dicts and the request JSON do);
// strings, lists and dicts are immutable once built and shared by pointer, so copying a Value is
// cheap. Mutable state exists only inside Objects (namespace(), loop, cycler).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hearth::chat {

class Value;
class Object;
class Evaluator;

using ValueList = std::vector<Value>;
struct ValueDict;

// Thrown for runtime failures inside the engine; the evaluator adds the template line.
struct RuntimeFailure {
  std::string message;
};
[[noreturn]] void runtime_fail(std::string message);

class Value {
 public:
  enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Tuple,
    Dict,
    Object
  };

  Value() : kind_(Kind::Undefined) {}
  static Value undefined(std::string hint);  // hint: the message an error on it reports
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(ValueDict d);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const {
    return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool;
  }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence_like() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // Int and Bool
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }  // String; Undefined: the hint
  const ValueList& items() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  const std::shared_ptr<Object>& obj() const { return obj_; }

  bool truthy() const;
  // Python str(): what {{ value }} prints.
  std::string to_str() const;
  // Python repr(): how values print inside containers.
  std::string repr() const;
  // Python type name for error messages ("str", "int", "dict", ...).
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const ValueDict> dict_;
  std::shared_ptr<Object> obj_;
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  size_t size() const { return entries.size(); }
};

// Keyword and positional arguments of a call.
struct CallArgs {
  ValueList pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(const std::string& name) const;
  // Python-style binding: positional i or keyword name, else fallback.
  Value get(size_t index, const std::string& name, Value fallback = Value()) const;
};

// Objects with behaviour: namespaces, loop contexts, macros, builtin functions.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual Value get_attr(const std::string& name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Evaluator& ev, CallArgs& args);
  virtual std::string repr() const { return "<" + type_name() + " object>"; }
};

// A builtin function or bound method.
class Function : public Object {
 public:
  using Fn = std::function<Value(Evaluator&, CallArgs&)>;
  Function(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Evaluator& ev, CallArgs& args) override { return fn_(ev, args); }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }

 private:
  std::string name_;
  Fn fn_;
};
Value make_function(std::string name, Function::Fn fn);

// namespace(): the one object templates may assign attributes on.
class Namespace : public Object {
 public:
  ValueDict attrs;
  std::string type_name() const override { return "Namespace"; }
  Value get_attr(const std::string& name) const override;
  std::string repr() const override { return "<Namespace>"; }
};

// Python equality and ordering. compare() throws RuntimeFailure on unorderable types.
bool values_equal(const Value& a, const Value& b);
int values_compare(const Value& a, const Value& b);
// len(); throws for values without a length.
int64_t value_length(const Value& v);
// Iterates like Python's iter(): lists, tuples, dict keys, string characters; undefined is empty.
ValueList value_iterate(const Value& v);

// JSON bridge. from_json keeps object key order and refuses (TemplateError) documents nested
// deeper than kMaxJsonDepth, whatever parsed them; to_json_text is Python's json.dumps.
Value value_from_json(const nlohmann::ordered_json& j, int depth = 0);
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string value_to_json(const Value& v, const JsonDumpOptions& opts);

}  // namespace hearth::chat
