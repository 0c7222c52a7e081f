// Internal interface between the matmul dispatcher (matmul.cpp) and its per-ISA kernel files.
// Each kernel computes whole output columns y[:, o_begin:o_end) for all n rows of x, so threads
// split the weight rows statically and every weight byte is streamed from memory once per call.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace hearth::cpu::detail {

// x as the kernels want it: f32 rows of kpad (multiple of 32) floats, zero-padded past k.
// For BF16 weights the vector kernels read weights as (even, odd) halves of each chunk of
// `chunk` elements, so x is stored permuted the same way inside each chunk (see pack_x).
struct MatmulArgs {
  float* y = nullptr;         // [n, out]
  const float* x = nullptr;   // raw x [n, k] (generic kernel)
  const float* xp = nullptr;  // packed x [n, kpad] (vector kernels)
  const void* w = nullptr;    // [out, k] in w_dtype, rows possibly 2-byte aligned only
  DType w_dtype = DType::F32;
  const void* bias = nullptr;  // [out] in bias_dtype, or nullptr
  DType bias_dtype = DType::F32;
  int64_t n = 0, k = 0, kpad = 0, out = 0;
};

inline float load_scalar(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: {  // memcpy: f32 weights in a checkpoint may be only 2-byte aligned
      float f;
      std::memcpy(&f, static_cast<const char*>(p) + i * 4, 4);
      return f;
    }
  }
}

inline float bias_at(const MatmulArgs& a, int64_t o) {
  return a.bias ? load_scalar(a.bias, a.bias_dtype, o) : 0.0f;
}

// Packs rows [r_begin, r_end) of x into xp (see MatmulArgs). chunk = 0: natural order.
void pack_x(float* xp, const float* x, int64_t k, int64_t kpad, int64_t r_begin, int64_t r_end,
            int chunk);

void matmul_rows_generic(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
void matmul_rows_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);    // chunk 16
void matmul_rows_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);  // chunk 32
// Register-blocked GEMM over packed 64-column panels (matmul_avx512_gemm.cpp): reads a.x
// directly (no pack_x). Columns [o_begin, o_end), all n rows.
void matmul_cols_avx512_gemm(const MatmulArgs& a, int64_t o_begin, int64_t o_end);

// AMX-BF16 (BF16 weights only). amx_request_permission() asks Linux for tile state once per
// process; false means the kernel must not be used.
bool amx_request_permission();
// Packs x into the hi/lo bf16 tile layout for rows [r_begin, r_end) (multiples of 16 except
// at n) and runs the tile kernel for output columns [o_begin, o_end) (multiples of 32 except at
// out). amx_scratch_bytes tells the dispatcher how much shared scratch the packed x needs.
size_t amx_packed_x_bytes(int64_t n, int64_t k);
void amx_pack_x(uint16_t* packed, const float* x, int64_t n, int64_t k, int64_t r_begin,
                int64_t r_end);
void matmul_cols_amx(const MatmulArgs& a, const uint16_t* packed_x, int64_t o_begin, int64_t o_end);

}  // namespace hearth::cpu::detail
