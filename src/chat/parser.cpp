// Recursive-descent parser mirroring jinja2/parser.py (3.1): statement tags, expression
// precedence and the exact places where tuples, conditional expressions and test arguments
// are allowed. Nesting depth is capped so hostile input cannot exhaust the stack.
#include "chat/parser.h"

#include <algorithm>

#include "chat/lexer.h"
#include "chat/template.h"

namespace hearth::chat {
namespace {

constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  StmtList parse_all() { return subparse({}); }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& look(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().text == op; }
  bool is_name(const char* name) const {
    return cur().type == TokenType::Name && cur().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail_at(const Token& t, const std::string& what) const {
    throw TemplateError(
        fmt::format("chat template: line {}, column {}: {}", t.line, t.column, what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(cur(), what); }

  void expect_op(const char* op) {
    if (!is_op(op)) {
      if (cur().type == TokenType::Eof)
        fail(fmt::format("unexpected end of template, expected '{}'.", op));
      fail(fmt::format("expected token '{}', got '{}'", op, describe_token(cur())));
    }
    advance();
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) {
      if (cur().type == TokenType::Eof)
        fail(fmt::format("unexpected end of template, expected '{}'.", what));
      fail(fmt::format("expected token '{}', got '{}'", what, describe_token(cur())));
    }
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name)
      fail(fmt::format("expected token 'name', got '{}'", describe_token(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail("template nesting too deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  std::string looking_for_message() const {
    std::string tags;
    const auto& [names, innermost] = end_stack_.back();
    for (size_t i = 0; i < names.size(); ++i) tags += (i ? " or '" : "'") + names[i] + "'";
    return fmt::format(
        "Jinja was looking for the following tags: {}. The innermost block that needs to be closed "
        "is '{}'.",
        tags, innermost);
  }

  StmtList subparse(const std::vector<std::string>& end_tags) {
    StmtList body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::VarBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Print;
        s->line = t.line;
        s->expr = parse_tuple(false, true, {}, false);
        expect(TokenType::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::BlockBegin) {
        const Token& name = look();
        if (name.type == TokenType::Name &&
            std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else if (t.type == TokenType::Eof) {
        if (!end_tags.empty()) fail("Unexpected end of template. " + looking_for_message());
        return body;
      } else {
        fail(fmt::format("unexpected '{}'", describe_token(t)));
      }
    }
  }

  // After a statement header: `%}`, the body up to one of end_tags; leaves the end tag's
  // name as the current token (the `{%` is consumed).
  StmtList parse_body(std::vector<std::string> end_tags, const char* innermost) {
    expect(TokenType::BlockEnd, "end of statement block");
    end_stack_.emplace_back(end_tags, innermost);
    StmtList body = subparse(end_tags);
    end_stack_.pop_back();
    advance();  // {%
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (t.type != TokenType::Name) fail("tag name expected");
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    std::string tag = t.text;
    advance();
    if (tag == "if") {
      s->kind = StmtKind::If;
      while (true) {
        ExprPtr test = parse_tuple(false, false, {}, false);
        StmtList body = parse_body({"elif", "else", "endif"}, "if");
        s->branches.emplace_back(std::move(test), std::move(body));
        std::string next = expect_name();
        if (next == "elif") continue;
        if (next == "else") {
          s->else_body = parse_body({"endif"}, "if");
          expect_name();
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::For;
      s->target = parse_assign_target({"in"});
      if (!skip_name("in"))
        fail(fmt::format("expected token 'in', got '{}'", describe_token(cur())));
      s->expr = parse_tuple(false, false, {"recursive"}, false);
      if (skip_name("if")) s->filter = parse_expression(true);
      s->recursive = skip_name("recursive");
      ++loop_depth_;
      s->body = parse_body({"endfor", "else"}, "for");
      --loop_depth_;
      if (expect_name() == "else") {
        s->else_body = parse_body({"endfor"}, "for");
        expect_name();
      }
    } else if (tag == "set") {
      if (cur().type == TokenType::Name && look().type == TokenType::Op && look().text == ".") {
        auto ns = node(ExprKind::NsRef, cur().line);
        ns->value = Value(cur().text);
        advance();
        advance();
        ns->name = expect_name();
        s->target = std::move(ns);
      } else {
        s->target = parse_assign_target({});
      }
      if (skip_op("=")) {
        s->kind = StmtKind::Set;
        s->expr = parse_tuple(false, true, {}, false);
      } else {
        s->kind = StmtKind::SetBlock;
        if (is_op("|")) s->filter = parse_filter(nullptr, false);
        s->body = parse_body({"endset"}, "set");
        expect_name();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::Macro;
      s->text = expect_name();
      parse_signature(*s);
      parse_macro_body(*s, "endmacro", "macro");
    } else if (tag == "call") {
      s->kind = StmtKind::CallBlock;
      if (is_op("(")) parse_signature(*s);
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::Call) fail_at(t, "expected call");
      parse_macro_body(*s, "endcall", "call");
    } else if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter(nullptr, true);
      s->body = parse_body({"endfilter"}, "filter");
      expect_name();
    } else if (tag == "with") {
      s->kind = StmtKind::With;
      while (cur().type != TokenType::BlockEnd) {
        if (!s->assignments.empty()) expect_op(",");
        ExprPtr target = parse_assign_target({});
        expect_op("=");
        s->assignments.emplace_back(std::move(target), parse_expression(true));
      }
      s->body = parse_body({"endwith"}, "with");
      expect_name();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(t, fmt::format("'{}' outside loop", tag));
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
    } else if (tag == "generation") {
      s->kind = StmtKind::Generation;
      s->body = parse_body({"endgeneration"}, "generation");
      expect_name();
    } else {
      for (auto it = end_stack_.rbegin(); it != end_stack_.rend(); ++it) {
        if (std::find(it->first.begin(), it->first.end(), tag) != it->first.end()) {
          fail_at(t, fmt::format("Encountered unknown tag '{}'. {}", tag, looking_for_message()));
        }
      }
      if (!end_stack_.empty() && tag.rfind("end", 0) == 0) {
        fail_at(t, fmt::format("Encountered unknown tag '{}'. {}", tag, looking_for_message()));
      }
      fail_at(t, fmt::format("Encountered unknown tag '{}'.", tag));
    }
    expect(TokenType::BlockEnd, "end of statement block");
    return s;
  }

  void parse_macro_body(Stmt& s, const char* end_tag, const char* innermost) {
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(&s);
    s.body = parse_body({end_tag}, innermost);
    macros_.pop_back();
    loop_depth_ = saved_loops;
    expect_name();
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else if (!s.params.empty() && s.params.back().default_value) {
        fail("non-default argument follows default argument");
      }
      s.params.push_back(std::move(p));
    }
    expect_op(")");
  }

  static bool assignable(const Expr& e) {
    if (e.kind == ExprKind::Name) return true;
    if (e.kind != ExprKind::Tuple) return false;
    return std::all_of(e.items.begin(), e.items.end(),
                       [](const ExprPtr& i) { return assignable(*i); });
  }

  ExprPtr parse_assign_target(const std::vector<std::string>& extra_end) {
    const Token& t = cur();
    ExprPtr target = parse_tuple(true, true, extra_end, false);
    if (!assignable(*target)) fail_at(t, "can't assign to this expression");
    return target;
  }

  // ---- expressions ----

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd ||
        (t.type == TokenType::Op && t.text == ")")) {
      return true;
    }
    return t.type == TokenType::Name &&
           std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      const std::vector<std::string>& extra_end, bool explicit_parentheses) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified) {
        args.push_back(parse_primary());
      } else {
        args.push_back(parse_expression(with_condexpr));
      }
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses)
        fail(fmt::format("Expected an expression, got '{}'", describe_token(cur())));
    }
    auto e = node(ExprKind::Tuple, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto e = node(ExprKind::CondExpr, line);
      e->b = parse_or();
      e->a = std::move(expr1);
      if (skip_name("else")) e->c = parse_condexpr();
      expr1 = std::move(e);
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, ExprPtr l, ExprPtr r, int line, std::string op = {}) {
    auto e = node(kind, line);
    e->a = std::move(l);
    e->b = std::move(r);
    e->name = std::move(op);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      left = binary(ExprKind::Or, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      left = binary(ExprKind::And, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      int line = cur().line;
      advance();
      auto e = node(ExprKind::Not, line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::Op && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                      t.text == "<=" || t.text == ">" || t.text == ">=")) {
        ops.push_back(t.text);
        advance();
      } else if (is_name("in")) {
        ops.emplace_back("in");
        advance();
      } else if (is_name("not") && look().type == TokenType::Name && look().text == "in") {
        ops.emplace_back("notin");
        advance();
        advance();
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = node(ExprKind::Compare, line);
    e->items.push_back(std::move(expr));
    for (auto& o : operands) e->items.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(ExprKind::Binary, std::move(left), parse_concat(), line, op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto e = node(ExprKind::Concat, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(ExprKind::Binary, std::move(left), parse_pow(), line, op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      left = binary(ExprKind::Binary, std::move(left), parse_unary(true), line, "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    int line = cur().line;
    ExprPtr n;
    if (is_op("-") || is_op("+")) {
      bool neg = cur().text == "-";
      advance();
      n = node(neg ? ExprKind::Neg : ExprKind::Pos, line);
      n->a = parse_unary(false);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::Name) {
      ExprPtr e;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e = node(ExprKind::Const, line);
        e->value = Value(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        e = node(ExprKind::Const, line);
        e->value = Value::none();
      } else {
        e = node(ExprKind::Name, line);
        e->name = t.text;
        for (Stmt* m : macros_) {
          if (t.text == "varargs") m->uses_varargs = true;
          if (t.text == "kwargs") m->uses_kwargs = true;
          if (t.text == "caller") m->uses_caller = true;
        }
      }
      advance();
      return e;
    }
    if (t.type == TokenType::String) {
      std::string s;
      while (cur().type == TokenType::String) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      auto e = node(ExprKind::Const, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::Int || t.type == TokenType::Float) {
      auto e = node(ExprKind::Const, line);
      e->value = t.type == TokenType::Int ? Value(t.int_value) : Value(t.float_value);
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      advance();
      auto e = node(ExprKind::List, line);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      advance();
      auto e = node(ExprKind::Dict, line);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    if (t.type == TokenType::Eof) fail("unexpected end of template");
    fail(fmt::format("unexpected '{}'", describe_token(t)));
  }

  ExprPtr parse_postfix(ExprPtr n) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr n) {
    while (true) {
      if (is_op("|")) {
        n = parse_filter(std::move(n), false);
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr n) {
    const Token t = cur();
    advance();
    if (t.text == ".") {
      const Token attr = cur();
      advance();
      if (attr.type == TokenType::Name) {
        auto e = node(ExprKind::Getattr, t.line);
        e->a = std::move(n);
        e->name = attr.text;
        return e;
      }
      if (attr.type != TokenType::Int) fail_at(attr, "expected name or number");
      auto e = node(ExprKind::Getitem, t.line);
      e->a = std::move(n);
      e->b = node(ExprKind::Const, attr.line);
      e->b->value = Value(attr.int_value);
      return e;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::Getitem, t.line);
    e->a = std::move(n);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = node(ExprKind::Tuple, t.line);
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    auto slice = node(ExprKind::Slice, line);
    if (is_op(":")) {
      advance();
      slice->items.push_back(nullptr);
    } else {
      ExprPtr first = parse_expression(true);
      if (!is_op(":")) return first;
      advance();
      slice->items.push_back(std::move(first));
    }
    if (is_op(":") || is_op("]") || is_op(",")) {
      slice->items.push_back(nullptr);
    } else {
      slice->items.push_back(parse_expression(true));
    }
    if (skip_op(":")) {
      if (is_op("]") || is_op(",")) {
        slice->items.push_back(nullptr);
      } else {
        slice->items.push_back(parse_expression(true));
      }
    } else {
      slice->items.push_back(nullptr);
    }
    return slice;
  }

  void parse_call_args(CallArgsExpr& out) {
    const Token open = cur();
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at(open, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!out.star && !out.double_star);
        advance();
        out.star = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!out.double_star);
        advance();
        out.double_star = parse_expression(true);
      } else if (cur().type == TokenType::Name && look().type == TokenType::Op &&
                 look().text == "=") {
        ensure(!out.double_star);
        std::string key = cur().text;
        advance();
        advance();
        out.kw.emplace_back(key, parse_expression(true));
      } else {
        ensure(!out.star && !out.double_star && out.kw.empty());
        out.pos.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr n) {
    auto e = node(ExprKind::Call, cur().line);
    e->a = std::move(n);
    parse_call_args(e->args);
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr n, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      auto e = node(ExprKind::Filter, cur().line);
      e->name = parse_dotted_name();
      if (is_op("(")) parse_call_args(e->args);
      e->a = std::move(n);
      n = std::move(e);
    }
    return n;
  }

  ExprPtr parse_test(ExprPtr n) {
    auto e = node(ExprKind::Test, cur().line);
    advance();  // is
    e->negated = skip_name("not");
    e->name = parse_dotted_name();
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e->args);
    } else if ((t.type == TokenType::Name || t.type == TokenType::String ||
                t.type == TokenType::Int || t.type == TokenType::Float || is_op("[") ||
                is_op("{")) &&
               !(t.type == TokenType::Name &&
                 (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.pos.push_back(parse_postfix(parse_primary()));
    }
    e->a = std::move(n);
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
  std::vector<std::pair<std::vector<std::string>, std::string>> end_stack_;
};

}  // namespace

std::shared_ptr<TemplateProgram> parse_template(std::string_view source) {
  auto program = std::make_shared<TemplateProgram>();
  program->source = std::string(source);
  Parser parser(tokenize(source));
  program->body = parser.parse_all();
  return program;
}

}  // namespace hearth::chat
