// CPU ops of the Qwen3.5 / Qwen3-Next family that ops.h does not cover: the Gated DeltaNet
// pieces (causal conv1d + SiLU, gate activations, the delta rule in recurrent and chunked form,
// gated RMSNorm) and the small row ops of the mixture-of-experts block. All f32; see backend.h
// for each op's contract. The kernels are compiled for baseline x86-64, AVX2+FMA and AVX-512
// and picked at run time (gdn_simd.h), so the library stays baseline.
#pragma once
#include "backend/backend.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state, const Tensor& w,
                        ThreadPool& pool);
void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                       const Tensor& a_log, const Tensor& dt_bias);
void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const GatedDeltaParams& params, ThreadPool& pool);
void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z, float eps,
                    ThreadPool& pool);
void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate);
void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows);
void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows, const float* weights);

// Which delta-rule kernel build runs here ("avx512", "avx2" or "baseline").
const char* gated_delta_isa();

}  // namespace hearth::cpu
