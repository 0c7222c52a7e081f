// Gated DeltaNet (Qwen3.5 / Qwen3-Next linear attention) on the GPU: the causal depthwise conv1d
// + SiLU with its carried state, the decay / write-strength gates, and the gated delta rule.
// The delta rule has two kernels. The recurrent one (decode, short calls, and prefill when
// GatedDeltaParams::chunked is off): one block owns a value head's 32-column slab of the state
// [Dk, 32] f32 in shared memory for the whole call and walks the tokens one by one; every value
// column evolves independently, so slabs never communicate. The chunked one (prefill with
// `chunked`): the same split, but the slab advances a chunk of tokens at a time through small
// f32 products (see "chunked form" below). State, g and beta are f32 (any float dtype is read);
// q | k | v come in the activation dtype (or f32). Launched with programmatic dependent launch
// (decode steps run these once per linear layer): each kernel waits for its inputs before
// touching anything.
#include <algorithm>

#include "backend/cuda/gated_delta.cuh"

namespace hearth::cuda {

namespace {

// Token t of channel c: silu(Σ_j w[j, c] · [state ‖ x][t + j, c]), the state holding the K-1
// inputs before the call's first token.
__device__ __forceinline__ void conv_token(void* y, int ydt, const void* x, int xdt,
                                           const void* state, int sdt, const void* w, int wdt,
                                           int64_t t, int64_t c, int64_t C, int K) {
  float acc = 0.0f;
#pragma unroll 4  // the taps' loads go out together (K is 4 in every checkpoint seen)
  for (int j = 0; j < K; ++j) {
    const int64_t p = t - (K - 1) + j;
    const float in = p >= 0 ? ld(x, xdt, p * C + c) : ld(state, sdt, (K - 1 + p) * C + c);
    acc += ld(w, wdt, int64_t(j) * C + c) * in;
  }
  st(y, ydt, t * C + c, acc * sigmoid_f(acc));
}

// Channel c's new state: the last K-1 rows of [state ‖ x]; ascending rows only read rows not
// yet written.
__device__ __forceinline__ void conv_new_state(const void* x, int xdt, void* state, int sdt,
                                               int64_t n, int64_t c, int64_t C, int K) {
  for (int r = 0; r < K - 1; ++r) {
    const int64_t p = n - (K - 1) + r;
    const float v = p >= 0 ? ld(x, xdt, p * C + c) : ld(state, sdt, (K - 1 + p) * C + c);
    st(state, sdt, int64_t(r) * C + c, v);
  }
}

// One thread per channel; tokens in order, so the state update needs no synchronisation.
__global__ void conv1d_kernel(void* y, int ydt, const void* x, int xdt, void* state, int sdt,
                              const void* w, int wdt, int64_t n, int64_t C, int K) {
  if (n <= kDecodeTokens) pdl_trigger();  // see kDecodeTokens
  pdl_wait();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t t = 0; t < n; ++t) conv_token(y, ydt, x, xdt, state, sdt, w, wdt, t, c, C, K);
  conv_new_state(x, xdt, state, sdt, n, c, C, K);
}

// Prefill form of the conv: a thread per (token, channel), so a 2048-token chunk is not 2048
// dependent steps of one thread per channel (that walk took 2 ms per layer on the 9B shape).
// The state is not touched here; conv1d_state_kernel updates it after every output is written.
__global__ void conv1d_tokens_kernel(void* y, int ydt, const void* x, int xdt, const void* state,
                                     int sdt, const void* w, int wdt, int64_t n, int64_t C, int K) {
  pdl_wait();  // a prefill-sized call: the next kernel is not let in early (see kDecodeTokens)
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y)
    conv_token(y, ydt, x, xdt, state, sdt, w, wdt, t, c, C, K);
}

// The state update after conv1d_tokens_kernel, a thread per channel.
__global__ void conv1d_state_kernel(const void* x, int xdt, void* state, int sdt, int64_t n,
                                    int64_t C, int K) {
  pdl_wait();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  conv_new_state(x, xdt, state, sdt, n, c, C, K);
}

__global__ void gates_kernel(void* g, int gdt, void* beta, int bdt, const void* a, int adt,
                             const void* b, int bbdt, const void* a_log, int ldt,
                             const void* dt_bias, int ddt, int64_t n, int64_t h) {
  pdl_trigger();
  pdl_wait();
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n * h;
       x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = x % h;
    const float z = ld(a, adt, x) + ld(dt_bias, ddt, i);
    const float sp = z > 20.0f ? z : log1pf(expf(z));
    st(g, gdt, x, -expf(ld(a_log, ldt, i)) * sp);
    st(beta, bdt, x, sigmoid_f(ld(b, bbdt, x)));
  }
}

constexpr int kRowGroups = 8;

// Block (value head h, slab c0 = 32·blockIdx.y); dynamic smem: S [dk][32], q [dk], k [dk],
// red [8][32].
__global__ void __launch_bounds__(kCols* kRowGroups)
    gated_delta_kernel(void* out, int odt, const void* qkv, int qdt, const void* g, int gdt,
                       const void* beta, int bdt, float* state, int n, int hk, int hv, int dk,
                       int dv) {
  extern __shared__ float sm[];
  if (n <= kDecodeTokens) pdl_trigger();  // see kDecodeTokens
  float* S = sm;
  float* qs = S + dk * kCols;
  float* ks = qs + dk;
  float* red = ks + dk;
  const int h = blockIdx.x, c0 = blockIdx.y * kCols;
  const int col = threadIdx.x % kCols, rg = threadIdx.x / kCols;
  const int kh = h / (hv / hk);
  const bool col_ok = c0 + col < dv;
  const int64_t row = int64_t(2 * hk) * dk + int64_t(hv) * dv;
  float* Sg = state + int64_t(h) * dk * dv;
  pdl_wait();
  // A thread's rows of the state slab go out kBatch at a time: the loop that stored each before
  // loading the next made dk/8 dependent round trips of a decode step.
  constexpr int kBatch = 16;
  for (int i0 = rg; i0 < dk; i0 += kBatch * kRowGroups) {
    float sv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kRowGroups;
      sv[u] = col_ok && i < dk ? Sg[int64_t(i) * dv + c0 + col] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * kRowGroups;
      if (i < dk) S[i * kCols + col] = sv[u];
    }
  }
  const float q_scale = rsqrtf(float(dk));
  for (int t = 0; t < n; ++t) {
    const int64_t base = int64_t(t) * row;
    // This token's gate, beta and v are requested with q and k, before the norms need them.
    const float decay = expf(ld(g, gdt, int64_t(t) * hv + h));
    const float bt = ld(beta, bdt, int64_t(t) * hv + h);
    const float v =
        col_ok ? ld(qkv, qdt, base + int64_t(2 * hk) * dk + int64_t(h) * dv + c0 + col) : 0.0f;
    // L2-normalise q and k (eps 1e-6 inside the sqrt, as transformers' l2norm).
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      qs[i] = ld(qkv, qdt, base + int64_t(kh) * dk + i);
      ks[i] = ld(qkv, qdt, base + int64_t(hk) * dk + int64_t(kh) * dk + i);
    }
    __syncthreads();
    float pq = 0.0f, pk = 0.0f;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      pq += qs[i] * qs[i];
      pk += ks[i] * ks[i];
    }
    const float sq = block_sum(pq);
    const float sk = block_sum(pk);
    const float iq = rsqrtf(sq + 1e-6f) * q_scale, ik = rsqrtf(sk + 1e-6f);
    // S ← e^g·S; mem = Sᵀk.
    float mem = 0.0f;
    for (int i = rg; i < dk; i += kRowGroups) {
      float s = S[i * kCols + col] * decay;
      S[i * kCols + col] = s;
      mem += s * ks[i] * ik;
    }
    red[rg * kCols + col] = mem;
    __syncthreads();
    mem = 0.0f;
    for (int r = 0; r < kRowGroups; ++r) mem += red[r * kCols + col];
    const float delta = bt * (v - mem);
    __syncthreads();  // red is reused below
    float o = 0.0f;
    for (int i = rg; i < dk; i += kRowGroups) {
      const float s = S[i * kCols + col] + ks[i] * ik * delta;
      S[i * kCols + col] = s;
      o += s * qs[i] * iq;
    }
    red[rg * kCols + col] = o;
    __syncthreads();
    if (rg == 0 && col_ok) {
      float sum = 0.0f;
      for (int r = 0; r < kRowGroups; ++r) sum += red[r * kCols + col];
      st(out, odt, (int64_t(t) * hv + h) * dv + c0 + col, sum);
    }
    __syncthreads();  // qs, ks, red are rewritten by the next token
  }
  if (col_ok)
    for (int i = rg; i < dk; i += kRowGroups) Sg[int64_t(i) * dv + c0 + col] = S[i * kCols + col];
}

}  // namespace

void gated_delta_init() {
  int dev = 0, optin = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&dev));
  HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  // The recurrent kernel needs at most ~36 KiB (Dk = 256); the cap keeps sm_89 (99 KiB) valid.
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(gated_delta_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         std::min(160 * 1024, optin)));
  gated_delta_chunked_init(optin);
}

void conv1d_causal_silu(Ctx& ctx, const Ten& y, const Ten& x, const Ten& state, const Ten& w) {
  const int64_t n = x.rows(), C = x.cols();
  const int K = int(w.rows());
  const unsigned channel_blocks = unsigned((C + 127) / 128);
  if (n <= kDecodeTokens) {  // one thread per channel walks the few tokens and the state
    launch_pdl(ctx, conv1d_kernel, dim3(channel_blocks), dim3(128), 0, y.p, y.dtype, x.p, x.dtype,
               state.p, state.dtype, w.p, w.dtype, n, C, K);
  } else {
    launch_pdl(ctx, conv1d_tokens_kernel,
               dim3(channel_blocks, unsigned(std::min<int64_t>(n, 65535))), dim3(128), 0, y.p,
               y.dtype, x.p, x.dtype, state.p, state.dtype, w.p, w.dtype, n, C, K);
    HEARTH_CUDA_LAUNCHED();
    launch_pdl(ctx, conv1d_state_kernel, dim3(channel_blocks), dim3(128), 0, x.p, x.dtype, state.p,
               state.dtype, n, C, K);
  }
  HEARTH_CUDA_LAUNCHED();
}

void gated_delta_gates(Ctx& ctx, const Ten& g, const Ten& beta, const Ten& a, const Ten& b,
                       const Ten& a_log, const Ten& dt_bias) {
  const int64_t n = a.rows(), h = a.cols();
  launch_pdl(ctx, gates_kernel, dim3(grid_for(n * h, 256)), dim3(256), 0, g.p, g.dtype, beta.p,
             beta.dtype, a.p, a.dtype, b.p, b.dtype, a_log.p, a_log.dtype, dt_bias.p, dt_bias.dtype,
             n, h);
  HEARTH_CUDA_LAUNCHED();
}

void gated_delta(Ctx& ctx, const Ten& out, const Ten& qkv, const Ten& g, const Ten& beta,
                 const Ten& state, const GatedDeltaParams& p) {
  if (state.dtype != kF32)
    cuda_fail("gated_delta", "the recurrent state must be F32", __FILE__, __LINE__);
  if (p.chunked && qkv.rows() > kDecodeTokens &&
      gated_delta_chunked(ctx, out, qkv, g, beta, state, p))
    return;
  const int n = int(qkv.rows());
  const size_t smem = (size_t(p.k_dim) * kCols + 2 * size_t(p.k_dim) + kRowGroups * kCols) * 4;
  dim3 grid(unsigned(p.n_v_heads), unsigned((p.v_dim + kCols - 1) / kCols));
  launch_pdl(ctx, gated_delta_kernel, grid, dim3(kCols * kRowGroups), smem, out.p, out.dtype, qkv.p,
             qkv.dtype, g.p, g.dtype, beta.p, beta.dtype, static_cast<float*>(state.p), n,
             p.n_k_heads, p.n_v_heads, p.k_dim, p.v_dim);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
