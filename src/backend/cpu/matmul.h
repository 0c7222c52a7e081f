// CPU linear op: y[n, out] (f32) = x[n, in] (f32) · w[out, in]ᵀ (+ bias[out]).
// Weights are read in place in their stored dtype (F32, F16, BF16), usually from an mmapped
// checkpoint: read-only, rows only 2-byte aligned. Accumulation is always f32 (or better), so
// results match an f64 reference to ~1e-6 of the output's norm; bf16 matrix units (AVX512-BF16
// dot products, AMX tiles) see x split as hi + lo = bf16(x) + bf16(x - bf16(x)), which keeps
// products f32-accurate because bf16 weights are exact in bf16.
// Kernels are chosen at run time (CPUID); the library stays baseline x86-64.
// No heap allocation per call in steady state: packing scratch is thread-local and grows once.
#pragma once
#include <string>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

// y must not alias x; x, y contiguous f32 with rows = n. bias dtype F32/F16/BF16 or empty.
// batch_invariant: the row kernels at every n (no GEMM or AMX blocking), so each row's result is
// the same bits whatever the other rows are (each output is one dot product summed in a fixed
// order); slower prefill.
void matmul(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, ThreadPool& pool,
            bool batch_invariant = false);

// Which kernels were selected at run time, e.g. "avx512+amx-bf16".
std::string matmul_isa();

namespace detail {

// Kernel families, from most to least capable. Each implies the ones below it are usable too.
enum class MatmulIsa { Generic, Avx2, Avx512, Amx };

// Best family this CPU (and OS, for AMX tile permission) supports.
MatmulIsa matmul_best_isa();
bool matmul_isa_supported(MatmulIsa isa);
const char* matmul_isa_name(MatmulIsa isa);

// matmul forced onto one kernel family (tests and benchmarks). Amx only changes BF16-weight
// calls with enough rows to fill tiles; everything else falls back to Avx512.
// Precondition: matmul_isa_supported(isa).
void matmul_with(MatmulIsa isa, const Tensor& y, const Tensor& x, const Tensor& w,
                 const Tensor& bias, ThreadPool& pool, bool batch_invariant = false);

}  // namespace detail
}  // namespace hearth::cpu
