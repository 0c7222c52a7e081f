// Hessian-aware trellis coding: block LDLQ (QTIP, Tseng et al. 2024, after GPTQ/QuIP's LDLQ).
// A linear layer's output error for inputs x is ΔW·x, so what the model sees of a weight error is
// the proxy loss tr(ΔW·H·ΔWᵀ) with H = Σ x·xᵀ over calibration inputs (H [in, in]).
// With H = L·D·Lᵀ (L unit lower block triangular, D block diagonal), the loss is
// Σ_j ‖(ΔW·L)_j‖²_{D_j}, and (ΔW·L)_j depends on the errors of blocks i ≥ j only: coding the
// blocks last to first, each towards its weights plus the later blocks' errors times L, makes
// every term the plain squared error of one block (weighted inside it by D_j, which the
// Viterbi coder ignores). Conventions: matrices row-major; `rows × cols` is the *stored*
// matrix as quantize_trellis_rows takes it (axis 0: Wᵀ, rows = input features).
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "quant/trellis.h"

namespace hearth::quant {

// H + σ·I with σ = rel · mean(diag H) (QTIP's regularisation: makes H positive definite and
// keeps directions no calibration input reached from being trusted blindly). h [n, n] f32 in,
// the result in f64. Throws naming `what` when h has a non-finite entry.
std::vector<double> hessian_regularised(const float* h, int64_t n, double rel, const char* what);

// Block LDL of a positive-definite s [n, n] (f64): the unit lower block-triangular L with
// s = L·D·Lᵀ, D block diagonal with blocks of `block` (n % block == 0), from the Cholesky factor
// C (L = C·blockdiag(C_jj)⁻¹). Returns L [n, n] f32 (zeros above the diagonal blocks, identity
// on them), or an empty vector when s is not positive definite. Multithreaded on `pool`.
std::vector<float> block_ldl_lower(const double* s, int64_t n, int64_t block, ThreadPool* pool);

// tr(ΔW·H·ΔWᵀ) for the stored-layout difference `delta` [rows, cols] of a module coded on `axis`
// (axis 1: ΔW = delta, H [cols, cols]; axis 0: ΔW = deltaᵀ, H [rows, rows]). f64 accumulation.
double trellis_proxy_loss(const float* delta, int64_t rows, int64_t cols, const float* h, int axis,
                          ThreadPool* pool);

struct TrellisLdlqResult {
  bool used_ldlq = false;  // false: the plain Viterbi codes were kept (the guard below)
  double proxy_plain = 0;  // tr(ΔW·H·ΔWᵀ) of plain Viterbi (per-block squared error)
  double proxy_ldlq = 0;   // of LDLQ; 0 when H carried no information (all zero)
};

// quantize_trellis_rows (same arguments, same layout and scale rule) with the error feedback of
// block LDLQ under H, the module's input Hessian [in, in] f32 (symmetric; any positive scale):
// - axis 1 (rows = outputs, coded along the input dim): blocks of 256 input columns, last to
//   first, each row's block j coded towards w_j + Σ_{i>j} (w_i − ŵ_i)·L_ij; L of block size 256,
//   so the feedback crosses whole trellis blocks. Row scale: the RMS rule of the original row.
// - axis 0 (stored rows = input features, coded along the outputs): the feedback runs across
//   stored rows, last to first, with the scalar LDL (block 1): row i is coded towards
//   w_i + Σ_{i'>i} L[i'][i]·(w_i' − ŵ_i'); every element of a row then has the same weight D_ii,
//   which is exactly the Viterbi coder's objective. Row scale: the RMS rule of that target.
// H is regularised first (σ = 1e-2 · mean diag). Guard (as mlx-bun's): plain Viterbi is run too
// and kept when its proxy loss is not higher, so LDLQ never makes a module worse under H.
// Multithreaded on `pool`; the blocks are coded by `coder` (nullptr: the CPU's, on `pool`), a
// batch per 256-column block (axis 1) or per stored row (axis 0). Returns early (codes
// unspecified) once *cancel is set.
TrellisLdlqResult quantize_trellis_rows_ldlq(const float* w, int64_t rows, int64_t cols, int k,
                                             const float* h, int axis, uint32_t* codes,
                                             uint16_t* scales_f16, ThreadPool* pool,
                                             const std::atomic<bool>* cancel = nullptr,
                                             TrellisBlockCoder* coder = nullptr);

}  // namespace hearth::quant
