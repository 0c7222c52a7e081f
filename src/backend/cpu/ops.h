// CPU ops other than matmul: norms, rotary embedding, activations, elementwise, embedding lookup,
// attention over the KV cache. f32 activations; weights (norm gains, embedding tables) are read in
// their stored dtype. See backend.h for the contract of each op.
#pragma once
#include "backend/backend.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

// Reads n elements of any float dtype (F32, F16, BF16) into f32.
void load_f32(float* dst, const void* src, DType dtype, int64_t n);

void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float scale);
// `pool` runs the ops that split their work (a backend of a tensor-parallel rank has its own).
void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps, float weight_offset,
              ThreadPool& pool = ThreadPool::global());
void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope,
          ThreadPool& pool = ThreadPool::global());
void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act,
         ThreadPool& pool = ThreadPool::global());
// glu on n contiguous floats, on the calling thread (for kernels that fuse it into a product).
void glu_span(float* y, const float* gate, const float* up, int64_t n, Activation act);
void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale,
         ThreadPool& pool = ThreadPool::global());
void scale(const Tensor& x, float s);
void softcap(const Tensor& x, float cap);
void kv_store(const KvView& kv, const Tensor& k, const Tensor& v, const int32_t* positions);
// batch_invariant: one query at a time, never the prefill tiles (whose sums run in another
// order), so a query's result does not depend on how its prompt was chunked.
void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
               const AttentionParams& params, ThreadPool& pool, bool batch_invariant = false);

}  // namespace hearth::cpu
