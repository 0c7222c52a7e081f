// Rotary embedding (rotate_half pairs (i, i + rotary_dim/2), partial rotary, attention_factor)
// and the KV-cache store into ring slots. Positions, inverse frequencies and ids are device
// pointers: the backend uploads them per step, and a replayed decode graph reads the new values
// at the same addresses. The angle is the same f32 product as the CPU (pos * inv_freq), with
// full-precision sinf/cosf.
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

__global__ void rope_kernel(void* x, int dt, const int32_t* positions, const float* inv_freq,
                            int64_t n_tokens, int64_t n_heads, int64_t head_dim, int half,
                            float factor) {
  const int64_t total = n_tokens * n_heads * half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % half, th = i / half, t = th / n_heads;
    const float angle = float(positions[t]) * inv_freq[j];
    float s, c;
    sincosf(angle, &s, &c);
    c *= factor;
    s *= factor;
    const int64_t base = th * head_dim;
    const float a = ld(x, dt, base + j), b = ld(x, dt, base + j + half);
    st(x, dt, base + j, a * c - b * s);
    st(x, dt, base + j + half, b * c + a * s);
  }
}

__global__ void kv_store_kernel(void* kc, void* vc, int cdt, const void* k, int kdt, const void* v,
                                int vdt, const int32_t* positions, int64_t n_tokens, int64_t row,
                                int64_t capacity) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_tokens * row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / row, c = i - t * row;
    const int64_t slot = int64_t(positions[t]) % capacity;
    st(kc, cdt, slot * row + c, ld(k, kdt, i));
    st(vc, cdt, slot * row + c, ld(v, vdt, i));
  }
}

}  // namespace

void rope(Ctx& ctx, const Ten& x, const int32_t* positions, const float* inv_freq,
          int32_t rotary_dim, float attention_factor) {
  const int half = rotary_dim / 2;
  if (half == 0) return;
  const int64_t total = x.d[0] * x.d[1] * half;
  rope_kernel<<<grid_for(total, 256), 256, 0, ctx.stream>>>(
      x.p, x.dtype, positions, inv_freq, x.d[0], x.d[1], x.d[2], half, attention_factor);
  HEARTH_CUDA_LAUNCHED();
}

void kv_store(Ctx& ctx, const KvDev& kv, const Ten& k, const Ten& v, const int32_t* positions) {
  const int64_t n = k.d[0], row = k.numel() / n;
  kv_store_kernel<<<grid_for(n * row, 256), 256, 0, ctx.stream>>>(
      kv.k.p, kv.v.p, kv.k.dtype, k.p, k.dtype, v.p, v.dtype, positions, n, row, kv.capacity);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
