// Python's arithmetic and membership semantics for template values: int/float promotion
// (bool counts as int), true division always giving a float, floor division and modulo rounding
// toward negative infinity, str/list concatenation and repetition, `%` string formatting.
// Integers are 64-bit; an overflow is an error rather than a silent wrap.
#include <cmath>

#include "chat/builtins.h"
#include "chat/evaluator.h"

namespace hearth::chat {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  runtime_fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
               b.type_name() + "'");
}

template <typename Op>
Value int_checked(int64_t a, int64_t b, Op op) {
  int64_t r = 0;
  if (op(a, b, &r)) runtime_fail("integer overflow");
  return Value(r);
}

Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(times) > max_bytes / s.size())
      runtime_fail("string repetition exceeds the output limit");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value(std::move(out));
  }
  const ValueList& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(times) > (max_bytes / 8) / items.size())
    runtime_fail("list repetition too large");
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out))
                                          : Value::list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  if (m == 0) m = std::copysign(0.0, b);
  return m;
}

double py_floordiv(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) runtime_fail(v.str());
  if (v.is_float()) return Value(-v.as_double());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) runtime_fail("integer overflow");
    return Value(-v.as_int());
  }
  runtime_fail("bad operand type for unary -: '" + v.type_name() + "'");
}

Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_undefined()) runtime_fail(a.str());
  if (b.is_undefined()) runtime_fail(b.str());
  bool nums = a.is_number() && b.is_number();
  bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints)
      return int_checked(a.as_int(), b.as_int(), [](int64_t x, int64_t y, int64_t* r) {
        return __builtin_add_overflow(x, y, r);
      });
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_bytes)
        runtime_fail("string exceeds the output limit");
      return Value(a.str() + b.str());
    }
    if (a.kind() == b.kind() && a.is_sequence_like()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(items))
                                            : Value::list(std::move(items));
    }
    if (a.is_string() || a.is_sequence_like()) {
      runtime_fail("can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                   "\") to " + a.type_name());
    }
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints)
      return int_checked(a.as_int(), b.as_int(), [](int64_t x, int64_t y, int64_t* r) {
        return __builtin_sub_overflow(x, y, r);
      });
    if (nums) return Value(a.as_double() - b.as_double());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints)
      return int_checked(a.as_int(), b.as_int(), [](int64_t x, int64_t y, int64_t* r) {
        return __builtin_mul_overflow(x, y, r);
      });
    if (nums) return Value(a.as_double() * b.as_double());
    bool a_int = a.is_int() || a.is_bool(), b_int = b.is_int() || b.is_bool();
    if ((a.is_string() || a.is_sequence_like()) && b_int) return repeat(a, b.as_int(), max_bytes);
    if ((b.is_string() || b.is_sequence_like()) && a_int) return repeat(b, a.as_int(), max_bytes);
    if (a.is_string() || b.is_string() || a.is_sequence_like() || b.is_sequence_like()) {
      const Value& seq = (a.is_string() || a.is_sequence_like()) ? a : b;
      const Value& other = &seq == &a ? b : a;
      runtime_fail("can't multiply sequence by non-int of type '" + other.type_name() + "'");
    }
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_double() == 0) runtime_fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) unsupported("//", a, b);
    if (ints) {
      if (b.as_int() == 0) runtime_fail("integer division or modulo by zero");
      int64_t q = a.as_int() / b.as_int();
      if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
      return Value(q);
    }
    if (b.as_double() == 0) runtime_fail("float floor division by zero");
    return Value(py_floordiv(a.as_double(), b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.str(), b));
    if (!nums) unsupported("%", a, b);
    if (ints) {
      if (b.as_int() == 0) runtime_fail("integer modulo by zero");
      int64_t m = a.as_int() % b.as_int();
      if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
      return Value(m);
    }
    if (b.as_double() == 0) runtime_fail("float modulo");
    return Value(py_fmod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(acc, base, &acc)) runtime_fail("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) runtime_fail("integer overflow");
      }
      return Value(acc);
    }
    if (a.as_double() == 0 && b.as_double() < 0)
      runtime_fail("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  runtime_fail("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!item.is_string())
        runtime_fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& v : container.items()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::Dict:
      return container.dict().find(item) != nullptr;
    default:
      runtime_fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace hearth::chat
