// The decode GEMV kernels behind gemv_many, gemv_glu and gemv_residual (common.h): the register
// kernel of gemv.cu (the default), the bulk-copy kernel of gemv_bulk.cu and the tensor-core
// kernel of gemv_mma.cu (both opt-in: HEARTH_GEMV_BULK=1, HEARTH_GEMV_MMA=1; docs/cuda.md).
// Tests and benchmarks may pin one.
#pragma once

namespace hearth::cuda {

// Auto: the environment's choice (the register kernel unless a switch above is set). A pinned
// kernel runs wherever it applies (Bulk: one activation row on sm_90; Mma: up to 8 rows) and the
// register kernel elsewhere. Process-wide; for tests and benchmarks, not for production use.
enum class GemvKernel : int { Auto = 0, Register = 1, Bulk = 2, Mma = 3, Ring = 4, Even = 5 };
void gemv_set_kernel(GemvKernel k);

}  // namespace hearth::cuda
