// DType names and sizes, and IEEE half-precision conversions (used outside hot loops).
#include "core/dtype.h"

#include <array>
#include <cmath>

namespace hearth {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F64, "F64", 8},
    {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},
    {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},
    {DType::I32, "I32", 4},
    {DType::U32, "U32", 4},
    {DType::I64, "I64", 8},
    {DType::U64, "U64", 8},
    {DType::BOOL, "BOOL", 1},
}};
}  // namespace

size_t dtype_size(DType dtype) { return kDTypes[size_t(dtype)].size; }
std::string_view dtype_name(DType dtype) { return kDTypes[size_t(dtype)].name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | uint32_t(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {                // subnormal half: multiple of 2^-24
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));
  }
  uint32_t abits = bits & 0x7fffffffu;
  // Round to nearest even at bit 13.
  abits += 0xfffu + ((abits >> 13) & 1u);
  uint32_t exponent = (abits >> 23) - 127 + 15;
  return sign | uint16_t(exponent << 10 | ((abits >> 13) & 0x3ffu));
}

}  // namespace hearth
