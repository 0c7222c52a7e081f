// Element types of tensors as stored in checkpoints, and scalar conversions between the 16-bit
// float formats and f32. Vectorised conversions live in the backends; these are the references.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace hearth {

enum class DType : uint8_t { F32, F16, BF16, F64, I8, U8, I16, U16, I32, U32, I64, U64, BOOL };

// Bytes per element.
size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "BF16", ...
std::string_view dtype_name(DType dtype);
// Parses the safetensors spelling; nullopt for an unknown dtype.
std::optional<DType> dtype_from_name(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace hearth
