// CPU decode product for MLX-affine weights (src/quant/affine.h): y[n, out] = x[n, in] · Wᵀ for a
// few input rows, reading the packed codes directly (W is never materialised). Any n works;
// 1..8 is the target (every code is read once per 8 input rows). Multithreaded over output rows.
// - 4-bit weights whose rows are whole 64-input pairs run on int8 activations, as llama.cpp's
//   Q4 kernels do: x is quantized per 32 inputs (dx = max|x| / 127) and codes multiply
//   activation bytes in integer dot products (VNNI, or AVX2's pair sums);
//   the biases multiply the exact f32 sums of x. The error against the f32 product is at most
//   Σ |s·q| · dx / 2 over the row, the rounding of x (docs/design-notes.md, "Int8 activations").
// - Other weights, and CPUs without AVX2, dequantize in registers exactly as the reference
//   decoder does (scale · q + bias, f32), so results equal a dense f32 product with the decoded
//   weights to f32 rounding. Kernel families: AVX-512, AVX2 (both with BMI2), generic.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

// y [n, out] f32, x [n, in] f32 contiguous, w a packed affine [out, in]; no bias. allow_gemm
// false keeps many rows on the row kernels (the int8 GEMM rounds x differently).
void affine_matvec(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool,
                   bool allow_gemm = true);

// y [n, out] = act(x · gateᵀ) * (x · upᵀ) for two packed affine weights of one shape and
// group size on the int8 decode path (n ≤ 8): x is rounded once and each task runs its rows of
// both products and the activation, in one pass over the pool, with the same arithmetic as
// affine_matvec + glu. Returns false, doing nothing, when the pair does not take that path.
bool affine_glu(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up,
                Activation act, ThreadPool& pool);

// Whether affine_matvec has an int8 GEMM for w (AVX512-VNNI, 4 bits, whole 64-input pairs):
// then more than 8 input rows (prefill) are fast through it too.
bool affine_matvec_has_gemm(const Tensor& w);

// Rows [r0, r1) of a packed affine W as f32 [r1 - r0, in] (the prefill path), with the same
// decode; values equal quant::affine_dequantize_row's to f32 rounding.
void affine_dequantize_rows(const Tensor& w, int64_t r0, int64_t r1, float* out);

// The kernel family in use: "avx512", "avx2" or "generic".
std::string affine_matvec_isa();

namespace detail {

// Every family this CPU can run, best first.
std::vector<std::string> affine_matvec_isas();
// affine_matvec on one family of the f32 kernels (tests and benchmarks); isa from
// affine_matvec_isas().
void affine_matvec_with(std::string_view isa, const Tensor& y, const Tensor& x, const Tensor& w,
                        ThreadPool& pool);
// The int8-activation kernels this CPU runs for `bits`, best first ("avx512vnni", "avxvnni",
// "avx2"); empty when none (other bits, no AVX2).
std::vector<std::string> affine_int8_isas(int bits);
// affine_matvec on one int8 kernel; throws unless it runs here for w's bits and w's rows are
// whole 64-input pairs.
void affine_matvec_int8_with(std::string_view isa, const Tensor& y, const Tensor& x,
                             const Tensor& w, ThreadPool& pool);

}  // namespace detail
}  // namespace hearth::cpu
