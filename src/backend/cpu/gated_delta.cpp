// The gated delta rule on the CPU, per value head (one task per head; heads never share state).
// Recurrent form (decode, and prefill with HEARTH_GDN_PREFILL=recurrent): every value column of
// the state evolves independently, so the state is swept in blocks of 32 columns, each block
// ([Dk, 32] f32 = 16 KiB at Dk=128) staying in L1 across all tokens of the call.
// Chunked form (prefill): transformers' torch_chunk_gated_delta_rule — within a chunk of C tokens
// the delta updates are condensed by a unit-lower-triangular solve (forward substitution) into
// small f32 GEMMs: A = tril(βKKᵀ⊙Γ, -1); [U|W] = (I+A)⁻¹[βV | βK⊙e^γ]; V' = U − W·S;
// O = (Q⊙e^γ)·S + tril(QKᵀ⊙Γ)·V'; S ← e^{γ_C}·S + (K⊙e^{γ_C−γ})ᵀ·V'. A short last chunk equals
// transformers' zero padding (padding has g = 0, k = 0, so it leaves S unchanged).
// The kernels are always_inline templates instantiated under three target attributes
// (baseline, AVX2+FMA, AVX-512) and dispatched at run time; GEMM tiles are plain loops over a
// fixed-size register block that GCC vectorises for each target.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "backend/cpu/gated_delta.h"

#define GDN_INLINE inline __attribute__((always_inline))

namespace hearth::cpu {

namespace {

// One value head's inputs for the whole call, gathered contiguous by the caller.
struct HeadIo {
  const float* q;     // [n, dk] L2-normalised, scaled by dk^-1/2
  const float* k;     // [n, dk] L2-normalised
  const float* v;     // [n, dv]
  const float* g;     // [n] log decay
  const float* beta;  // [n]
  float* out;         // row t at out + t * out_stride, dv floats
  int64_t out_stride;
  float* state;  // [dk, dv]
  int n, dk, dv;
};

// Scratch for one chunk of one head (sized by the caller for chunk C).
struct ChunkScratch {
  float *kt, *qk, *a, *r, *vp, *qe, *kdt, *gam;
};

// --- small f32 GEMM: C[M,N] = (acc ? C : 0) + alpha · A[M,K] · B[K,N], all row-major ---

// 16 floats: one zmm in the AVX-512 build (two ymm / four xmm in the others).
typedef float v16 __attribute__((vector_size(64)));

template <int MR, int NR>
GDN_INLINE void gemm_tile(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                          int64_t ldb, int K, float alpha, bool acc) {
  // MR x NR accumulators as native vectors with constant trip counts, so they live in registers.
  constexpr int NV = NR / 16;
  v16 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[r][v] = v16{};
  for (int k = 0; k < K; ++k) {
    v16 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], B + k * ldb + 16 * v, sizeof(v16));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      v16 out = alpha * c[r][v];
      if (acc) {
        v16 old;
        std::memcpy(&old, C + r * ldc + 16 * v, sizeof old);
        out += old;
      }
      std::memcpy(C + r * ldc + 16 * v, &out, sizeof out);
    }
}

GDN_INLINE void gemm_edge(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                          int64_t ldb, int M, int N, int K, float alpha, bool acc) {
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += A[r * lda + k] * B[k * ldb + j];
      C[r * ldc + j] = (acc ? C[r * ldc + j] : 0.0f) + alpha * s;
    }
}

template <int NR, int MR>
GDN_INLINE void gemm_columns(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                             int64_t ldb, int M, int K, float alpha, bool acc) {
  int i = 0;
  for (; i + MR <= M; i += MR) gemm_tile<MR, NR>(C + i * ldc, ldc, A + i * lda, lda, B, ldb, K, alpha, acc);
  for (; i < M; ++i) gemm_tile<1, NR>(C + i * ldc, ldc, A + i * lda, lda, B, ldb, K, alpha, acc);
}

template <int NR>
GDN_INLINE void gemm(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                     int64_t ldb, int M, int N, int K, float alpha, bool acc) {
  int j = 0;
  for (; j + NR <= N; j += NR) gemm_columns<NR, 4>(C + j, ldc, A, lda, B + j, ldb, M, K, alpha, acc);
  for (; j + 16 <= N; j += 16) gemm_columns<16, 4>(C + j, ldc, A, lda, B + j, ldb, M, K, alpha, acc);
  if (j < N) gemm_edge(C + j, ldc, A, lda, B + j, ldb, M, N - j, K, alpha, acc);
}

// --- recurrent form ---

// Columns [c0, c0 + B) of the state, over every token.
template <int B>
GDN_INLINE void recurrent_columns(const HeadIo& io, int c0) {
  const int dk = io.dk, dv = io.dv;
  for (int t = 0; t < io.n; ++t) {
    const float decay = std::exp(io.g[t]), bt = io.beta[t];
    const float* k = io.k + int64_t(t) * dk;
    const float* q = io.q + int64_t(t) * dk;
    const float* v = io.v + int64_t(t) * dv + c0;
    float mem[B], delta[B], o[B];
    for (int j = 0; j < B; ++j) mem[j] = o[j] = 0.0f;
    // S ← e^g·S and kv_mem = Sᵀk in one sweep.
    for (int i = 0; i < dk; ++i) {
      float* s = io.state + int64_t(i) * dv + c0;
      const float ki = k[i];
      for (int j = 0; j < B; ++j) {
        s[j] *= decay;
        mem[j] += s[j] * ki;
      }
    }
    for (int j = 0; j < B; ++j) delta[j] = bt * (v[j] - mem[j]);
    // S += k δᵀ and o = Sᵀq in a second sweep.
    for (int i = 0; i < dk; ++i) {
      float* s = io.state + int64_t(i) * dv + c0;
      const float ki = k[i], qi = q[i];
      for (int j = 0; j < B; ++j) {
        s[j] += ki * delta[j];
        o[j] += s[j] * qi;
      }
    }
    float* out = io.out + t * io.out_stride + c0;
    for (int j = 0; j < B; ++j) out[j] = o[j];
  }
}

GDN_INLINE void head_recurrent(const HeadIo& io) {
  int c = 0;
  for (; c + 32 <= io.dv; c += 32) recurrent_columns<32>(io, c);
  for (; c < io.dv; ++c) recurrent_columns<1>(io, c);
}

// --- chunked form ---

template <int NR>
GDN_INLINE void head_chunked(const HeadIo& io, int C, const ChunkScratch& s) {
  const int dk = io.dk, dv = io.dv, w = dv + dk;
  float* S = io.state;
  for (int c0 = 0; c0 < io.n; c0 += C) {
    const int L = std::min(C, io.n - c0);
    const float* Q = io.q + int64_t(c0) * dk;
    const float* K = io.k + int64_t(c0) * dk;
    const float* V = io.v + int64_t(c0) * dv;
    const float* be = io.beta + c0;
    float cum = 0.0f;  // γ: cumulative log decay within the chunk, summed in order as torch does
    for (int i = 0; i < L; ++i) s.gam[i] = cum += io.g[c0 + i];
    for (int i = 0; i < L; ++i)
      for (int d = 0; d < dk; ++d) s.kt[d * L + i] = K[i * dk + d];
    gemm<NR>(s.qk, L, Q, dk, s.kt, L, L, L, dk, 1.0f, false);  // Q Kᵀ
    for (int i = 0; i < L; ++i) {  // P = tril(Q Kᵀ ⊙ Γ), diagonal included (Γ_ii = 1)
      for (int j = 0; j < i; ++j) s.qk[i * L + j] *= std::exp(s.gam[i] - s.gam[j]);
      for (int j = i + 1; j < L; ++j) s.qk[i * L + j] = 0.0f;
    }
    gemm<NR>(s.a, L, K, dk, s.kt, L, L, L, dk, 1.0f, false);  // K Kᵀ
    for (int i = 0; i < L; ++i) {  // A = tril(βKKᵀ ⊙ Γ, -1)
      for (int j = 0; j < i; ++j) s.a[i * L + j] *= be[i] * std::exp(s.gam[i] - s.gam[j]);
      for (int j = i; j < L; ++j) s.a[i * L + j] = 0.0f;
    }
    // R = [βV | βK⊙e^γ], then R ← (I + A)⁻¹ R by forward substitution: R = [U | W].
    // (An f64 solve was tried: it does not reduce the chunked form's error, which comes from the
    // cancellation in U − W·S, so everything stays f32 as in transformers.)
    for (int i = 0; i < L; ++i) {
      float* r = s.r + int64_t(i) * w;
      const float eg = be[i] * std::exp(s.gam[i]);
      for (int j = 0; j < dv; ++j) r[j] = be[i] * V[i * dv + j];
      for (int d = 0; d < dk; ++d) r[dv + d] = eg * K[i * dk + d];
      // r_i -= Σ_j A_ij r_j with the row block held in registers across j (one store per block).
      int x = 0;
      for (; x + 64 <= w; x += 64) {
        v16 acc[4];
        for (int v = 0; v < 4; ++v) std::memcpy(&acc[v], r + x + 16 * v, sizeof(v16));
        for (int j = 0; j < i; ++j) {
          const float a = s.a[i * L + j];
          const float* rj = s.r + int64_t(j) * w + x;
          for (int v = 0; v < 4; ++v) {
            v16 b;
            std::memcpy(&b, rj + 16 * v, sizeof b);
            acc[v] -= a * b;
          }
        }
        for (int v = 0; v < 4; ++v) std::memcpy(r + x + 16 * v, &acc[v], sizeof(v16));
      }
      for (; x < w; ++x) {
        float acc = r[x];
        for (int j = 0; j < i; ++j) acc -= s.a[i * L + j] * s.r[int64_t(j) * w + x];
        r[x] = acc;
      }
    }
    // V' = U − W·S
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < dv; ++j) s.vp[i * dv + j] = s.r[int64_t(i) * w + j];
    gemm<NR>(s.vp, dv, s.r + dv, w, S, dv, L, dv, dk, -1.0f, true);
    // O = (Q⊙e^γ)·S + P·V', written straight into the output rows.
    for (int i = 0; i < L; ++i) {
      const float eg = std::exp(s.gam[i]);
      for (int d = 0; d < dk; ++d) s.qe[i * dk + d] = Q[i * dk + d] * eg;
    }
    float* O = io.out + int64_t(c0) * io.out_stride;
    gemm<NR>(O, io.out_stride, s.qe, dk, S, dv, L, dv, dk, 1.0f, false);
    gemm<NR>(O, io.out_stride, s.qk, L, s.vp, dv, L, dv, L, 1.0f, true);
    // S ← e^{γ_L}·S + (K⊙e^{γ_L−γ})ᵀ·V'
    const float gl = s.gam[L - 1], chunk_decay = std::exp(gl);
    for (int64_t x = 0, nx = int64_t(dk) * dv; x < nx; ++x) S[x] *= chunk_decay;
    for (int i = 0; i < L; ++i) {
      const float e = std::exp(gl - s.gam[i]);
      for (int d = 0; d < dk; ++d) s.kdt[d * L + i] = K[i * dk + d] * e;
    }
    gemm<NR>(S, dv, s.kdt, L, s.vp, dv, dk, dv, L, 1.0f, true);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
void head_avx512(const HeadIo& io, bool chunked, int C, const ChunkScratch& s) {
  if (chunked) head_chunked<64>(io, C, s);
  else head_recurrent(io);
}
__attribute__((target("avx2,fma")))
void head_avx2(const HeadIo& io, bool chunked, int C, const ChunkScratch& s) {
  if (chunked) head_chunked<32>(io, C, s);
  else head_recurrent(io);
}
#endif
void head_baseline(const HeadIo& io, bool chunked, int C, const ChunkScratch& s) {
  if (chunked) head_chunked<16>(io, C, s);
  else head_recurrent(io);
}

enum class GdnIsa { Baseline, Avx2, Avx512 };

GdnIsa gdn_isa() {
  static const GdnIsa isa = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return GdnIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GdnIsa::Avx2;
#endif
    return GdnIsa::Baseline;
  }();
  return isa;
}

// x · rsqrt(Σx² + 1e-6) in f32, as transformers' l2norm (FLA's convention), times `scale`.
void l2_normalise(float* dst, const float* src, int n, float scale) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += src[i] * src[i];
  const float inv = 1.0f / std::sqrt(sum + 1e-6f);
  for (int i = 0; i < n; ++i) dst[i] = src[i] * inv * scale;
}

}  // namespace

const char* gated_delta_isa() {
  switch (gdn_isa()) {
    case GdnIsa::Avx512: return "avx512";
    case GdnIsa::Avx2: return "avx2";
    default: return "baseline";
  }
}

void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const GatedDeltaParams& p, ThreadPool& pool) {
  const int n = int(qkv.rows());
  const int hk = p.n_k_heads, hv = p.n_v_heads, dk = p.k_dim, dv = p.v_dim;
  const int group = hv / hk;
  const int64_t row = qkv.cols();
  const int C = std::max(1, p.chunk);
  const bool chunked = p.chunked && n > 1;
  const float q_scale = 1.0f / std::sqrt(float(dk));
  pool.parallel_for(hv, 1, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    // Strong decays drive e^γ and the state into subnormals, which cost ~100x per operation on
    // x86; flushing them (values below 1.2e-38) changes nothing measurable.
    const unsigned saved_csr = _mm_getcsr();
    _mm_setcsr(saved_csr | 0x8040);  // FTZ | DAZ
#endif
    thread_local std::vector<float> io_buf, chunk_buf;
    io_buf.resize(size_t(n) * size_t(2 * dk + dv));
    float* qn = io_buf.data();
    float* kn = qn + int64_t(n) * dk;
    float* vn = kn + int64_t(n) * dk;
    ChunkScratch cs{};
    if (chunked) {
      const int64_t w = dv + dk;
      chunk_buf.resize(size_t(int64_t(dk) * C * 2 + int64_t(C) * C * 2 + int64_t(C) * w +
                              int64_t(C) * dv + int64_t(C) * dk + C));
      float* f = chunk_buf.data();
      cs.kt = f; f += int64_t(dk) * C;
      cs.kdt = f; f += int64_t(dk) * C;
      cs.qk = f; f += int64_t(C) * C;
      cs.a = f; f += int64_t(C) * C;
      cs.r = f; f += int64_t(C) * w;
      cs.vp = f; f += int64_t(C) * dv;
      cs.qe = f; f += int64_t(C) * dk;
      cs.gam = f;
    }
    thread_local std::vector<float> gh, bh;
    gh.resize(size_t(n));
    bh.resize(size_t(n));
    for (int64_t h = begin; h < end; ++h) {
      const int64_t kh = h / group;
      for (int t = 0; t < n; ++t) {
        const float* r = qkv.as<const float>() + t * row;
        l2_normalise(qn + int64_t(t) * dk, r + kh * dk, dk, q_scale);
        l2_normalise(kn + int64_t(t) * dk, r + int64_t(hk) * dk + kh * dk, dk, 1.0f);
        const float* v = r + int64_t(2 * hk) * dk + h * dv;
        std::copy(v, v + dv, vn + int64_t(t) * dv);
        gh[size_t(t)] = g.as<const float>()[t * hv + h];
        bh[size_t(t)] = beta.as<const float>()[t * hv + h];
      }
      HeadIo io{qn, kn, vn, gh.data(), bh.data(), out.as<float>() + h * dv, int64_t(hv) * dv,
                state.as<float>() + h * int64_t(dk) * dv, n, dk, dv};
      switch (gdn_isa()) {
#if defined(__x86_64__)
        case GdnIsa::Avx512: head_avx512(io, chunked, C, cs); break;
        case GdnIsa::Avx2: head_avx2(io, chunked, C, cs); break;
#endif
        default: head_baseline(io, chunked, C, cs); break;
      }
    }
#if defined(__x86_64__)
    _mm_setcsr(saved_csr);
#endif
  });
}

}  // namespace hearth::cpu
