// Statement execution and expression evaluation (see evaluator.h). Errors raised deep inside
// operations are RuntimeFailure; render() turns them into TemplateError naming the line.
#include "chat/evaluator.h"

#include <ctime>

#include "chat/builtins.h"
#include "chat/pystr.h"

namespace hearth::chat {
namespace {

constexpr int kMaxEvalDepth = 3000;

class Macro : public Object {
 public:
  Macro(const Stmt* def, std::string name, const std::shared_ptr<Scope>& closure)
      : def_(def), name_(std::move(name)), closure_(closure) {}
  std::string type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  Value call(Evaluator& ev, CallArgs& args) override {
    auto closure = closure_.lock();
    if (!closure)
      runtime_fail("macro '" + name_ + "' was called after the scope that defined it ended");
    return ev.call_macro(*def_, name_, closure, args);
  }
  std::string repr() const override { return "<Macro '" + name_ + "'>"; }
  Value get_attr(const std::string& attr) const override {
    if (attr == "name") return Value(name_);
    return Object::get_attr(attr);
  }

 private:
  const Stmt* def_;
  std::string name_;
  // Weak: the defining scope holds the macro, so a strong pointer back would be a cycle.
  std::weak_ptr<Scope> closure_;
};

class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  LoopObject(ValueList items, int depth, const Stmt* stmt, std::shared_ptr<Scope> outer)
      : items_(std::move(items)), depth_(depth), stmt_(stmt), outer_(std::move(outer)) {}
  size_t index0 = 0;
  std::string type_name() const override { return "LoopContext"; }
  bool callable() const override { return stmt_->recursive; }
  Value call(Evaluator& ev, CallArgs& args) override {
    if (!stmt_->recursive) return Object::call(ev, args);
    if (args.pos.size() != 1) runtime_fail("loop() takes exactly one argument");
    auto outer = outer_.lock();
    if (!outer) runtime_fail("loop() called after its loop ended");
    return ev.call_loop(*stmt_, outer, args.pos[0], depth_ + 1);
  }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items_.size()) + ">";
  }
  Value get_attr(const std::string& name) const override {
    auto n = static_cast<int64_t>(items_.size());
    auto i = static_cast<int64_t>(index0);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(static_cast<int64_t>(depth_));
    if (name == "depth0") return Value(static_cast<int64_t>(depth_ - 1));
    if (name == "previtem")
      return i > 0 ? items_[index0 - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? items_[index0 + 1] : Value::undefined("there is no next item");
    // Weak: loop.changed() stores its arguments, which could hold these very functions.
    std::weak_ptr<LoopObject> weak = std::const_pointer_cast<LoopObject>(shared_from_this());
    auto lock = [](const std::weak_ptr<LoopObject>& w) {
      auto self = w.lock();
      if (!self) runtime_fail("the loop has ended");
      return self;
    };
    if (name == "cycle") {
      return make_function("cycle", [weak, lock](Evaluator&, CallArgs& args) -> Value {
        auto self = lock(weak);
        if (args.pos.empty()) runtime_fail("no items for cycling given");
        return args.pos[self->index0 % args.pos.size()];
      });
    }
    if (name == "changed") {
      return make_function("changed", [weak, lock](Evaluator&, CallArgs& args) -> Value {
        auto self = lock(weak);
        Value now = Value::list(args.pos);
        if (self->has_last_changed_ && values_equal(self->last_changed_, now)) return Value(false);
        self->last_changed_ = now;
        self->has_last_changed_ = true;
        return Value(true);
      });
    }
    return Object::get_attr(name);
  }

 private:
  ValueList items_;
  int depth_;
  const Stmt* stmt_;
  std::weak_ptr<Scope> outer_;  // weak: a namespace in that scope may hold this loop
  Value last_changed_;
  bool has_last_changed_ = false;
};

struct DepthGuard {
  int& depth;
  DepthGuard(int& d, int limit, const char* what) : depth(d) {
    if (++depth > limit) {
      --depth;
      runtime_fail(what);
    }
  }
  ~DepthGuard() { --depth; }
};

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(name, std::move(value));
}

Evaluator::Evaluator(const RenderOptions& options, std::shared_ptr<Scope> root)
    : options_(options), scope_(std::move(root)) {}

Evaluator::~Evaluator() {
  // Namespaces are the only values that can form reference cycles (`set ns.self = ns`);
  // emptying them when the render ends frees everything.
  std::vector<std::shared_ptr<Namespace>> alive;
  for (auto& w : namespaces_) {
    if (auto ns = w.lock()) alive.push_back(std::move(ns));
  }
  for (auto& ns : alive) ns->attrs.entries.clear();
}

void Evaluator::track(const std::shared_ptr<Namespace>& ns) { namespaces_.push_back(ns); }

std::string Evaluator::render(const StmtList& body) {
  std::string out;
  out_ = &out;
  try {
    exec_block(body);
  } catch (const RuntimeFailure& f) {
    throw TemplateError(fmt::format("chat template: line {}: {}", line_, f.message));
  }
  return out;
}

void Evaluator::check_size(size_t bytes) const {
  if (bytes > options_.max_output_bytes) {
    runtime_fail(fmt::format("output exceeds the limit of {} bytes", options_.max_output_bytes));
  }
}

void Evaluator::step() {
  if (++steps_ > options_.max_steps)
    runtime_fail(fmt::format("template exceeded {} steps", options_.max_steps));
}

std::time_t Evaluator::now() const { return options_.now ? *options_.now : std::time(nullptr); }

void Evaluator::append(const std::string& text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

std::string Evaluator::capture(const StmtList& body, std::shared_ptr<Scope> scope) {
  std::string buf;
  in_scope(std::move(scope), &buf, [&] { exec_block(body); });
  return buf;
}

Evaluator::Flow Evaluator::exec_block(const StmtList& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s) {
  line_ = s.line;
  step();
  switch (s.kind) {
    case StmtKind::Output:
      append(s.text);
      break;
    case StmtKind::Print:
      append(eval(*s.expr).to_str());
      break;
    case StmtKind::If:
      for (const auto& [test, body] : s.branches) {
        if (eval(*test).truthy()) return exec_block(body);
      }
      return exec_block(s.else_body);
    case StmtKind::For: {
      Value iterable = eval(*s.expr);
      return exec_for(s, iterable, 1);
    }
    case StmtKind::Set: {
      Value v = eval(*s.expr);
      assign(*s.target, v, *scope_);
      break;
    }
    case StmtKind::SetBlock: {
      Value v(capture(s.body, std::make_shared<Scope>(scope_)));
      if (s.filter) v = eval_filter_chain(*s.filter, v);
      assign(*s.target, v, *scope_);
      break;
    }
    case StmtKind::Macro:
      scope_->set(s.text, Value::object(std::make_shared<Macro>(&s, s.text, scope_)));
      break;
    case StmtKind::CallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.a);
      CallArgs args = eval_args(call.args);
      args.kw.emplace_back("caller", Value::object(std::make_shared<Macro>(&s, "caller", scope_)));
      append(this->call(callee, args).to_str());
      break;
    }
    case StmtKind::FilterBlock: {
      Value body(capture(s.body, std::make_shared<Scope>(scope_)));
      append(eval_filter_chain(*s.expr, body).to_str());
      break;
    }
    case StmtKind::With: {
      auto inner = std::make_shared<Scope>(scope_);
      for (const auto& [target, value] : s.assignments) assign(*target, eval(*value), *inner);
      return in_scope(inner, nullptr, [&] { return exec_block(s.body); });
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::Generation:
      return exec_block(s.body);
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const Value& iterable, int depth) {
  ValueList items = value_iterate(iterable);
  auto outer = scope_;
  if (s.filter) {  // `for x in xs if cond`: filtered before loop.* is computed
    ValueList kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>(outer);
      assign(*s.target, item, *probe);
      if (in_scope(probe, nullptr, [&] { return eval(*s.filter).truthy(); })) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (!s.else_body.empty()) return exec_block(s.else_body);
    return Flow::Normal;
  }
  auto loop = std::make_shared<LoopObject>(items, depth, &s, outer);
  Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    loop->index0 = i;
    auto iteration = std::make_shared<Scope>(outer);
    assign(*s.target, items[i], *iteration);
    iteration->set("loop", loop_value);
    if (in_scope(iteration, nullptr, [&] { return exec_block(s.body); }) == Flow::Break) break;
  }
  return Flow::Normal;
}

Value Evaluator::call_loop(const Stmt& loop, const std::shared_ptr<Scope>& outer,
                           const Value& iterable, int depth) {
  DepthGuard guard(call_depth_, options_.max_call_depth, "maximum recursion depth exceeded");
  std::string buf;
  in_scope(outer, &buf, [&] { exec_for(loop, iterable, depth); });
  return Value(std::move(buf));
}

Value Evaluator::call_macro(const Stmt& def, const std::string& name,
                            const std::shared_ptr<Scope>& closure, CallArgs& args) {
  DepthGuard guard(call_depth_, options_.max_call_depth, "maximum recursion depth exceeded");
  step();
  auto scope = std::make_shared<Scope>(closure);
  auto kw = args.kw;
  auto take_kw = [&kw](const std::string& key) -> std::optional<Value> {
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      if (it->first == key) {
        Value v = it->second;
        kw.erase(it);
        return v;
      }
    }
    return std::nullopt;
  };
  const auto& params = def.params;
  auto saved_scope = scope_;
  scope_ = scope;  // defaults may refer to earlier parameters
  try {
    for (size_t i = 0; i < params.size(); ++i) {
      Value v;
      std::optional<Value> given;
      if (i < args.pos.size()) {
        given = args.pos[i];
      } else {
        given = take_kw(params[i].name);
      }
      if (given) {
        v = *given;
      } else if (params[i].default_value) {
        v = eval(*params[i].default_value);
      } else {
        v = Value::undefined("parameter '" + params[i].name + "' was not provided");
      }
      scope->set(params[i].name, v);
    }
  } catch (...) {
    scope_ = saved_scope;
    throw;
  }
  scope_ = saved_scope;
  if (def.uses_caller) {
    auto caller = take_kw("caller");
    scope->set("caller", caller ? *caller : Value::undefined("No caller defined"));
  }
  if (def.uses_kwargs) {
    ValueDict d;
    for (auto& [k, v] : kw) d.set(Value(k), v);
    scope->set("kwargs", Value::dict(std::move(d)));
  } else if (!kw.empty()) {
    runtime_fail("macro '" + name + "' takes no keyword argument '" + kw.front().first + "'");
  }
  if (def.uses_varargs) {
    ValueList rest;
    for (size_t i = params.size(); i < args.pos.size(); ++i) rest.push_back(args.pos[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  } else if (args.pos.size() > params.size()) {
    runtime_fail("macro '" + name + "' takes not more than " + std::to_string(params.size()) +
                 " argument(s)");
  }
  return Value(capture(def.body, scope));
}

void Evaluator::assign(const Expr& target, const Value& value, Scope& scope) {
  if (target.kind == ExprKind::Name) {
    scope.set(target.name, value);
  } else if (target.kind == ExprKind::Tuple) {
    ValueList items = value_iterate(value);
    size_t want = target.items.size();
    if (items.size() > want)
      runtime_fail("too many values to unpack (expected " + std::to_string(want) + ")");
    if (items.size() < want) {
      runtime_fail("not enough values to unpack (expected " + std::to_string(want) + ", got " +
                   std::to_string(items.size()) + ")");
    }
    for (size_t i = 0; i < want; ++i) assign(*target.items[i], items[i], scope);
  } else if (target.kind == ExprKind::NsRef) {
    Value ns = lookup(target.value.str());
    auto* space = ns.is_object() ? dynamic_cast<Namespace*>(ns.obj().get()) : nullptr;
    if (!space) runtime_fail("cannot assign attribute on non-namespace object");
    space->attrs.set(Value(target.name), value);
  } else {
    runtime_fail("can't assign to this expression");
  }
}

Value Evaluator::lookup(const std::string& name) const {
  if (const Value* v = scope_->find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) runtime_fail(callee.str());
  if (!callee.is_object() || !callee.obj()->callable())
    runtime_fail("'" + callee.type_name() + "' object is not callable");
  return callee.obj()->call(*this, args);
}

Value Evaluator::apply_filter(const std::string& name, const Value& operand, CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (!fn) runtime_fail("No filter named '" + name + "'.");
  return fn(*this, operand, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& operand, CallArgs& args) {
  TestFn fn = find_test(name);
  if (!fn) runtime_fail("No test named '" + name + "'.");
  return fn(*this, operand, args);
}

Value Evaluator::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      runtime_fail(obj.str());
    case Value::Kind::Dict: {
      if (has_method(obj, name)) return find_method(obj, name);
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::Object:
      return obj.obj()->get_attr(name);
    case Value::Kind::String:
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (has_method(obj, name)) return find_method(obj, name);
      [[fallthrough]];
    default:
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value Evaluator::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      runtime_fail(obj.str());
    case Value::Kind::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::String:
      if (key.is_int() || key.is_bool()) {
        int64_t n = value_length(obj);
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          if (!obj.is_string()) return obj.items()[static_cast<size_t>(i)];
          std::u32string u = utf8_decode(obj.str());
          return Value(utf8_encode(std::u32string_view(u).substr(static_cast<size_t>(i), 1)));
        }
        return Value::undefined(obj.type_name() + " object has no element " + key.repr());
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.str());  // jinja falls back to attributes
  return Value::undefined(obj.type_name() + " object has no element " + key.repr());
}

Value Evaluator::eval_slice(const Value& obj, const Expr& slice) {
  if (obj.is_undefined()) runtime_fail(obj.str());
  auto part = [&](size_t i) -> std::optional<int64_t> {
    if (!slice.items[i]) return std::nullopt;
    Value v = eval(*slice.items[i]);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      runtime_fail("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  auto start = part(0), stop = part(1), step_v = part(2);
  int64_t step = step_v.value_or(1);
  if (step == 0) runtime_fail("slice step cannot be zero");
  if (!obj.is_string() && !obj.is_sequence_like())
    runtime_fail("'" + obj.type_name() + "' object is not subscriptable");
  int64_t n = value_length(obj);
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t b = adjust(start, step < 0 ? n - 1 : 0);
  int64_t e = adjust(stop, step < 0 ? -1 : n);
  std::vector<size_t> idx;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) idx.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.str()), r;
    for (size_t i : idx) r.push_back(u[i]);
    return Value(utf8_encode(r));
  }
  ValueList out;
  for (size_t i : idx) out.push_back(obj.items()[i]);
  return obj.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out))
                                          : Value::list(std::move(out));
}

CallArgs Evaluator::eval_args(const CallArgsExpr& a) {
  CallArgs args;
  for (const auto& e : a.pos) args.pos.push_back(eval(*e));
  for (const auto& [k, e] : a.kw) args.kw.emplace_back(k, eval(*e));
  if (a.star) {
    for (auto& v : value_iterate(eval(*a.star))) args.pos.push_back(v);
  }
  if (a.double_star) {
    Value d = eval(*a.double_star);
    if (!d.is_dict()) runtime_fail("argument after ** must be a mapping, not " + d.type_name());
    for (const auto& [k, v] : d.dict().entries) args.kw.emplace_back(k.to_str(), v);
  }
  return args;
}

Value Evaluator::eval_filter_chain(const Expr& filter, const Value& input) {
  Value operand = filter.a ? eval_filter_chain(*filter.a, input) : input;
  line_ = filter.line;
  CallArgs args = eval_args(filter.args);
  return apply_filter(filter.name, operand, args);
}

bool Evaluator::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  int c = values_compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value Evaluator::eval(const Expr& e) {
  DepthGuard guard(eval_depth_, kMaxEvalDepth, "maximum recursion depth exceeded");
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      ValueList items;
      for (const auto& i : e.items) items.push_back(eval(*i));
      return e.kind == ExprKind::List ? Value::list(std::move(items))
                                      : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i]);
        d.set(k, eval(*e.items[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Getattr:
      return get_attr(eval(*e.a), e.name);
    case ExprKind::Getitem: {
      Value obj = eval(*e.a);
      if (e.b->kind == ExprKind::Slice) return eval_slice(obj, *e.b);
      return get_item(obj, eval(*e.b));
    }
    case ExprKind::Slice:
      runtime_fail("slice outside of a subscript");
    case ExprKind::Call: {
      Value callee = eval(*e.a);
      CallArgs args = eval_args(e.args);
      line_ = e.line;
      return call(callee, args);
    }
    case ExprKind::Filter: {
      Value operand = eval(*e.a);
      CallArgs args = eval_args(e.args);
      line_ = e.line;
      return apply_filter(e.name, operand, args);
    }
    case ExprKind::Test: {
      Value operand = eval(*e.a);
      CallArgs args = eval_args(e.args);
      line_ = e.line;
      bool r = apply_test(e.name, operand, args);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::Neg:
      return negate(eval(*e.a));
    case ExprKind::Pos: {
      Value v = eval(*e.a);
      if (v.is_undefined()) runtime_fail(v.str());
      if (!v.is_number()) runtime_fail("bad operand type for unary +: '" + v.type_name() + "'");
      return v.is_bool() ? Value(v.as_int()) : v;
    }
    case ExprKind::Not:
      return Value(!eval(*e.a).truthy());
    case ExprKind::Binary: {
      Value a = eval(*e.a);
      Value b = eval(*e.b);
      line_ = e.line;
      return binary_op(e.name, a, b, options_.max_output_bytes);
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& i : e.items) {
        s += eval(*i).to_str();
        check_size(s.size());
      }
      return Value(std::move(s));
    }
    case ExprKind::And: {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.items[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1]);
        line_ = e.line;
        if (!compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::CondExpr: {
      if (eval(*e.b).truthy()) return eval(*e.a);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::NsRef:
      runtime_fail("namespace reference outside of an assignment");
  }
  return Value();
}

}  // namespace hearth::chat
