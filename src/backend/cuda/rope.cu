// Rotary embedding (rotate_half pairs (i, i + rotary_dim/2), partial rotary, attention_factor)
// and the store into the paged KV cache (common.h, KvDev). Positions, inverse frequencies and ids
// are device pointers: the backend uploads them per step, and a replayed decode graph reads the new
// values at the same addresses. The angle is the same f32 product as the CPU (pos * inv_freq), with
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

__global__ void kv_store_kernel(void* const* blocks, int64_t k_off, int64_t v_off, const void* k,
                                int kdt, const void* v, int vdt, const int32_t* positions,
                                int64_t n_tokens, int64_t row) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_tokens * row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / row, c = i - t * row, p = positions[t];
    st(kv_row(blocks, k_off + c, row, p), kBF16, 0, ld(k, kdt, i));
    st(kv_row(blocks, v_off + c, row, p), kBF16, 0, ld(v, vdt, i));
  }
}

// One warp per head of one token: heads [0, n_head) are q, [n_head, n_head + n_kv) k,
// [n_head + n_kv, n_head + 2 n_kv) v. Lane l holds elements l + 32 j (j < E), so with
// rotary_dim/2 a multiple of 32 both halves of a rotate_half pair sit in the same lane.
// Each stage rounds to the tensor's dtype as the composed ops do when they store.
// seqs non-null: token t's cache is seqs[t] (blocks unused), a step of several sequences.
template <int E>
__global__ void qk_norm_rope_store_kernel(void* q, int qdt, const void* k, int kdt, const void* v,
                                          int vdt, const void* qn, const void* kn, int ndt,
                                          float eps, float offset, void* const* blocks,
                                          int64_t k_off, int64_t v_off, const SeqKv* seqs,
                                          const int32_t* positions, const float* inv_freq, int half,
                                          float factor, int n_tokens, int n_head, int n_kv,
                                          int hd) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t gw = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int heads = n_head + 2 * n_kv;
  if (gw >= int64_t(n_tokens) * heads) {
    pdl_wait();
    return;
  }
  const int t = int(gw / heads), h = int(gw % heads);
  // Before waiting for the previous kernel: what no kernel of the step writes (positions,
  // frequencies and the cache table come from the host copy at the start of the step; gains
  // are weights).
  if (seqs) blocks = seqs[t].blocks;
  const int64_t pos = positions[t], row = int64_t(n_kv) * hd;
  const bool is_q = h < n_head;
  const void* gain = is_q ? qn : kn;
  float gv[E], cs[E], sn[E];
#pragma unroll
  for (int j = 0; j < E; ++j) {
    gv[j] = gain ? ld(gain, ndt, lane + 32 * j) + offset : 0.0f;
    cs[j] = 1.0f;
    sn[j] = 0.0f;
    if (lane + 32 * j < half) {
      sincosf(float(pos) * inv_freq[lane + 32 * j], &sn[j], &cs[j]);
      cs[j] *= factor;
      sn[j] *= factor;
    }
  }
  pdl_wait();
  if (h >= n_head + n_kv) {  // v: straight into the cache
    const int hv = h - n_head - n_kv;
    const int64_t src = (int64_t(t) * n_kv + hv) * hd;
    __nv_bfloat16* dst = kv_row(blocks, v_off + int64_t(hv) * hd, row, pos);
#pragma unroll
    for (int j = 0; j < E; ++j) st(dst, kBF16, lane + 32 * j, ld(v, vdt, src + lane + 32 * j));
    return;
  }
  const int dt = is_q ? qdt : kdt;
  const void* xs = is_q ? static_cast<const void*>(q) : k;
  const int64_t src = is_q ? (int64_t(t) * n_head + h) * hd : (int64_t(t) * n_kv + h - n_head) * hd;
  float x[E];
#pragma unroll
  for (int j = 0; j < E; ++j) x[j] = ld(xs, dt, src + lane + 32 * j);
  if (gain) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < E; ++j) ss += x[j] * x[j];
    const float inv = rsqrtf(warp_sum(ss) / float(hd) + eps);
#pragma unroll
    for (int j = 0; j < E; ++j) x[j] = rounded(dt, x[j] * inv * gv[j]);
  }
  if (half > 0) {
    const int hj = half / 32;
    // Pair (j, j + hj); both indices spelled as compile-time constants so x stays in registers.
#pragma unroll
    for (int j = 0; j < E; ++j) {
#pragma unroll
      for (int jj = j + 1; jj < E; ++jj) {
        if (j < hj && jj == j + hj) {
          const float a = x[j], b = x[jj];
          x[j] = rounded(dt, a * cs[j] - b * sn[j]);
          x[jj] = rounded(dt, b * cs[j] + a * sn[j]);
        }
      }
    }
  }
  if (is_q) {
#pragma unroll
    for (int j = 0; j < E; ++j) st(q, qdt, src + lane + 32 * j, x[j]);
  } else {
    __nv_bfloat16* dst = kv_row(blocks, k_off + int64_t(h - n_head) * hd, row, pos);
#pragma unroll
    for (int j = 0; j < E; ++j) st(dst, kBF16, lane + 32 * j, x[j]);
  }
}

}  // namespace

bool qk_rope_store_fits(int64_t head_dim, int32_t rotary_dim) {
  return head_dim % 32 == 0 && head_dim <= 256 && (rotary_dim / 2) % 32 == 0 &&
         rotary_dim <= head_dim;
}

namespace {

void launch_qk_norm_rope_store(Ctx& ctx, const Ten& q, const Ten& k, const Ten& v,
                               const Ten& q_norm, const Ten& k_norm, float eps, float offset,
                               const KvDev& kv, const SeqKv* seqs, const int32_t* positions,
                               const float* inv_freq, int32_t rotary_dim, float attention_factor) {
  const int n = int(q.d[0]), n_head = int(q.d[1]), hd = int(q.d[2]), n_kv = int(k.d[1]);
  const int64_t warps = int64_t(n) * (n_head + 2 * n_kv);
  const unsigned blocks = unsigned((warps + 3) / 4);
  const int ndt = q_norm.empty() ? k_norm.dtype : q_norm.dtype;
  auto go = [&](auto kernel) {
    launch_pdl(ctx, kernel, dim3(blocks), dim3(128), 0, q.p, q.dtype, k.p, k.dtype, v.p, v.dtype,
               q_norm.p, k_norm.p, ndt, eps, offset, kv.blocks, kv.k_off, kv.v_off, seqs, positions,
               inv_freq, rotary_dim / 2, attention_factor, n, n_head, n_kv, hd);
  };
  switch (hd / 32) {
    case 1:
      go(qk_norm_rope_store_kernel<1>);
      break;
    case 2:
      go(qk_norm_rope_store_kernel<2>);
      break;
    case 3:
      go(qk_norm_rope_store_kernel<3>);
      break;
    case 4:
      go(qk_norm_rope_store_kernel<4>);
      break;
    case 5:
      go(qk_norm_rope_store_kernel<5>);
      break;
    case 6:
      go(qk_norm_rope_store_kernel<6>);
      break;
    case 7:
      go(qk_norm_rope_store_kernel<7>);
      break;
    case 8:
      go(qk_norm_rope_store_kernel<8>);
      break;
    default:
      cuda_fail("qk_norm_rope_store", "unsupported head_dim", __FILE__, __LINE__);
  }
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace

void qk_norm_rope_store(Ctx& ctx, const Ten& q, const Ten& k, const Ten& v, const Ten& q_norm,
                        const Ten& k_norm, float eps, float offset, const KvDev& kv,
                        const int32_t* positions, const float* inv_freq, int32_t rotary_dim,
                        float attention_factor) {
  launch_qk_norm_rope_store(ctx, q, k, v, q_norm, k_norm, eps, offset, kv, nullptr, positions,
                            inv_freq, rotary_dim, attention_factor);
}

void qk_norm_rope_store_rows(Ctx& ctx, const Ten& q, const Ten& k, const Ten& v, const Ten& q_norm,
                             const Ten& k_norm, float eps, float offset, const KvDev& kv,
                             const SeqKv* seqs, const int32_t* positions, const float* inv_freq,
                             int32_t rotary_dim, float attention_factor) {
  launch_qk_norm_rope_store(ctx, q, k, v, q_norm, k_norm, eps, offset, kv, seqs, positions,
                            inv_freq, rotary_dim, attention_factor);
}

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
      kv.blocks, kv.k_off, kv.v_off, k.p, k.dtype, v.p, v.dtype, positions, n, row);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
