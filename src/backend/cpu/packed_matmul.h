// CPU products with packed weights (Tensor::packed: MLX affine, trellis). Decode (a few input
// rows) reads the codes directly and never materialises W; more rows dequantize W a block of
// output rows at a time into f32 and run the dense matmul on each block, so prefill gets the
// dense kernels' blocking. Accumulation is f32, the dequantized values those of the format's
// reference decoder (src/quant), so both paths agree with a dense model of the dequantized
// weights to rounding.
#pragma once
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

// y[n, out] (f32) = x[n, in] (f32) · Wᵀ (+ bias) for a packed 2-D W [out, in].
// batch_invariant: the direct kernels at every n (no dequantized blocks, no int8 GEMM), so each
// row's result is the same bits whatever the other rows are.
void packed_matmul(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                   ThreadPool& pool, bool batch_invariant = false);

// Rows [r0, r1) of a packed 2-D W as f32, [r1 - r0, in].
void packed_dequantize_rows(const Tensor& w, int64_t r0, int64_t r1, float* out);

}  // namespace hearth::cpu
