// Tree-walking evaluator for parsed chat templates, with Jinja2's scoping: a for-loop body gets
// a fresh scope per iteration (assignments inside do not leak out; namespace() is the way out),
// `if` opens no scope, macros close over the scope they were defined in. Hostile templates end
// in a TemplateError through the step, depth and output-size limits of RenderOptions.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/template.h"
#include "chat/value.h"

namespace hearth::chat {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
  const std::shared_ptr<Scope>& parent() const { return parent_; }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Evaluator {
 public:
  Evaluator(const RenderOptions& options, std::shared_ptr<Scope> root);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  std::string render(const StmtList& body);

  // Services for filters, tests and builtins.
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& operand, CallArgs& args);
  bool apply_test(const std::string& name, const Value& operand, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  void check_size(size_t bytes) const;
  void step();
  std::time_t now() const;
  void track(const std::shared_ptr<Namespace>& ns);  // broken up when the render ends

  // Used by macro and loop objects.
  Value call_macro(const Stmt& def, const std::string& name, const std::shared_ptr<Scope>& closure,
                   CallArgs& args);
  Value call_loop(const Stmt& loop, const std::shared_ptr<Scope>& outer, const Value& iterable,
                  int depth);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_block(const StmtList& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s, const Value& iterable, int depth);
  std::string capture(const StmtList& body, std::shared_ptr<Scope> scope);
  void assign(const Expr& target, const Value& value, Scope& scope);
  Value lookup(const std::string& name) const;
  Value eval(const Expr& e);
  Value eval_filter_chain(const Expr& filter, const Value& input);
  CallArgs eval_args(const CallArgsExpr& args);
  Value eval_slice(const Value& obj, const Expr& slice);
  bool compare(const std::string& op, const Value& a, const Value& b);
  void append(const std::string& text);
  // Runs f() with `scope` as the current scope and, when `out` is set, `out` as the output; the
  // previous ones are back however f() leaves (an exception propagates through).
  template <typename F>
  auto in_scope(std::shared_ptr<Scope> scope, std::string* out, F&& f) {
    struct Restore {
      Evaluator& e;
      std::shared_ptr<Scope> scope;
      std::string* out;
      ~Restore() {
        e.scope_ = std::move(scope);
        e.out_ = out;
      }
    } restore{*this, std::exchange(scope_, std::move(scope)),
              out ? std::exchange(out_, out) : out_};
    return f();
  }

  const RenderOptions& options_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int line_ = 0;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

// Runtime value operations (evaluator_ops.cpp).
Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& v);
bool contains(const Value& container, const Value& item);

}  // namespace hearth::chat
