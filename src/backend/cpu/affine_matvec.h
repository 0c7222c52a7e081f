// CPU decode product for MLX-affine weights (src/quant/affine.h): y[n, out] = x[n, in] · Wᵀ for a
// few input rows, reading the packed codes directly (W is never materialised) and dequantizing
// them in registers exactly as the reference decoder does (scale · q + bias, f32), so results
// equal a dense f32 product with the decoded weights to f32 rounding. Kernel families: AVX-512,
// AVX2 (both with BMI2), generic; picked once from CPUID. Multithreaded over output rows.
// Any n works; 1..8 is the target (every code is read once per 8 input rows).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

// y [n, out] f32, x [n, in] f32 contiguous, w a packed affine [out, in]; no bias.
void affine_matvec(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool);

// Rows [r0, r1) of a packed affine W as f32 [r1 - r0, in] (the prefill path), with the same
// decode; values equal quant::affine_dequantize_row's to f32 rounding.
void affine_dequantize_rows(const Tensor& w, int64_t r0, int64_t r1, float* out);

// The kernel family in use: "avx512", "avx2" or "generic".
std::string affine_matvec_isa();

namespace detail {

// Every family this CPU can run, best first.
std::vector<std::string> affine_matvec_isas();
// affine_matvec on one family (tests and benchmarks); isa from affine_matvec_isas().
void affine_matvec_with(std::string_view isa, const Tensor& y, const Tensor& x, const Tensor& w,
                        ThreadPool& pool);

}  // namespace detail
}  // namespace hearth::cpu
