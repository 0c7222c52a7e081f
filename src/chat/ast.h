// Syntax tree of a parsed chat template. Nodes are immutable after parsing and owned by the
// TemplateProgram; the evaluator holds raw pointers into it only while rendering.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace hearth::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  Const,     // value
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items: key, value, key, value, ...
  Getattr,   // a.name
  Getitem,   // a[b]
  Slice,     // items: start, stop, step (each may be null)
  Call,      // a(args)
  Filter,    // a | name(args); a is null inside filter blocks (the body is the operand)
  Test,      // a is [not] name(args)
  Neg,       // -a
  Pos,       // +a
  Not,       // not a
  Binary,    // a <name> b: + - * / // % **
  Concat,    // items joined with ~
  And,       // a and b
  Or,        // a or b
  Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
  CondExpr,  // a if b else c (c may be null)
  NsRef,     // name.attr as an assignment target
};

struct CallArgsExpr {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star;         // *args
  ExprPtr double_star;  // **kwargs
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, attribute, filter/test/operator name, NsRef attr
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  ExprPtr a, b, c;
  CallArgsExpr args;
  bool negated = false;
};

enum class StmtKind : uint8_t {
  Output,       // text
  Print,        // {{ expr }}
  If,           // branches, else_body
  For,          // target, iter, filter, body, else_body, recursive
  Set,          // target = expr
  SetBlock,     // target, optional filter, body
  Macro,        // name, params, body
  CallBlock,    // call expr, params, body
  FilterBlock,  // filter, body
  With,         // targets/values, body
  Break,
  Continue,
  Generation,  // transformers' {% generation %}: renders its body unchanged
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // Output text; Macro name
  ExprPtr expr;      // Print value, Set value, For iter, CallBlock call, Filter chain
  ExprPtr target;    // Set/For/SetBlock target
  ExprPtr filter;    // For loop filter; SetBlock filter
  std::vector<std::pair<ExprPtr, StmtList>> branches;  // If: (test, body)
  StmtList body;
  StmtList else_body;
  std::vector<Param> params;                             // Macro/CallBlock
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;  // With
  bool recursive = false;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // Macro body references
};

struct TemplateProgram {
  std::string source;
  StmtList body;
};

}  // namespace hearth::chat
