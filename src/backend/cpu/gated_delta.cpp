// The gated delta rule on the CPU, per value head (one task per head; heads never share state).
// Recurrent form (decode, and prefill with LoadOptions::gdn_recurrent_prefill): every value
// column of the state evolves independently, so the state is swept in blocks of 32 columns, each
// block ([Dk, 32] f32 = 16 KiB at Dk=128) staying in L1 across all tokens of the call.
// Chunked form (prefill): transformers' torch_chunk_gated_delta_rule — within a chunk of C tokens
// the delta updates are condensed by a unit-lower-triangular inverse (built row by row, as
// transformers does) into small f32 GEMMs: A = tril(βKKᵀ⊙Γ, -1); [U|W] = (I+A)⁻¹[βV | βK⊙e^γ];
// V' = U − W·S; O = (Q⊙e^γ)·S + tril(QKᵀ⊙Γ)·V'; S ← e^{γ_C}·S + (K⊙e^{γ_C−γ})ᵀ·V'. A short last
// chunk equals transformers' zero padding (padding has g = 0, k = 0, so it leaves S unchanged). The
// chunked form does about as many FLOPs as the recurrence (≈4·Dk·Dv FMAs per token-head); it wins
// only by running them as register-tiled GEMMs, so the kernel skips the zero halves of the
// triangular products, avoids copies (V' overwrites U, Q and Kᵀ are scaled in place, the decay of S
// is folded into its update GEMM) and computes the decay masks with a vector exp. The kernels are
// always_inline templates instantiated under three target attributes (baseline, AVX2+FMA, AVX-512)
// and dispatched at run time; GEMM tiles are plain loops over a fixed-size register block that GCC
// vectorises for each target.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "backend/cpu/gated_delta.h"
#include "backend/cpu/gdn_simd.h"

namespace hearth::cpu {

namespace {

using gdn::v16;

// One value head's inputs for the whole call, gathered contiguous by the caller.
struct HeadIo {
  float* q;           // [n, dk] L2-normalised, scaled by dk^-1/2 (the chunked form rescales it)
  const float* k;     // [n, dk] L2-normalised
  const float* v;     // [n, dv]
  const float* g;     // [n] log decay
  const float* beta;  // [n]
  float* out;         // row t at out + t * out_stride, dv floats
  int64_t out_stride;
  float* state;  // [dk, dv]
  int n, dk, dv;
};

// Scratch for one chunk of one head; ld is the chunk length rounded up to 16 (the padded
// columns of kt are zero so that triangular tiles may run past the chunk's last token).
struct ChunkScratch {
  float *kt, *qk, *a, *t, *r0, *r, *gam, *e;
  int ld;
};

GDN_INLINE int round16(int x) { return (x + 15) & ~15; }

// --- small f32 GEMM: C[M,N] = beta·C + alpha·A[M,K]·B[K,N], row-major (beta 0: C not read) ---

template <int MR, int NR>
GDN_INLINE void gemm_tile(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                          int64_t ldb, int K, float alpha, float beta) {
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
    for (int v = 0; v < NV; ++v) b[v] = gdn::load16(B + k * ldb + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      float* p = C + r * ldc + 16 * v;
      v16 out = alpha * c[r][v];
      if (beta != 0.0f) out += beta * gdn::load16(p);
      gdn::store16(p, out);
    }
}

GDN_INLINE void gemm_edge(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                          int64_t ldb, int M, int N, int K, float alpha, float beta) {
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += A[r * lda + k] * B[k * ldb + j];
      float* p = C + r * ldc + j;
      *p = (beta != 0.0f ? beta * *p : 0.0f) + alpha * s;
    }
}

// Rows [i0, i0 + MR) over N columns (N a multiple of 16), 64 columns per register block.
template <int MR>
GDN_INLINE void gemm_row_tile(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                              int64_t ldb, int N, int K, float alpha, float beta) {
  int j = 0;
  for (; j + 64 <= N; j += 64) gemm_tile<MR, 64>(C + j, ldc, A, lda, B + j, ldb, K, alpha, beta);
  if (N - j >= 32) {
    gemm_tile<MR, 32>(C + j, ldc, A, lda, B + j, ldb, K, alpha, beta);
    j += 32;
  }
  if (N - j >= 16) gemm_tile<MR, 16>(C + j, ldc, A, lda, B + j, ldb, K, alpha, beta);
}

GDN_INLINE void gemm(float* C, int64_t ldc, const float* A, int64_t lda, const float* B,
                     int64_t ldb, int M, int N, int K, float alpha, float beta) {
  const int N16 = N & ~15;
  if (N16 > 0) {
    int i = 0;
    for (; i + 4 <= M; i += 4)
      gemm_row_tile<4>(C + i * ldc, ldc, A + i * lda, lda, B, ldb, N16, K, alpha, beta);
    for (; i < M; ++i)
      gemm_row_tile<1>(C + i * ldc, ldc, A + i * lda, lda, B, ldb, N16, K, alpha, beta);
  }
  if (N16 < N) gemm_edge(C + N16, ldc, A, lda, B + N16, ldb, M, N - N16, K, alpha, beta);
}

// C[L, ld] = A[L,K]·Bt[K, ld] on and below the diagonal, in 16-column blocks: the tiles wholly
// above the diagonal are skipped (their entries are left stale: callers mask them).
GDN_INLINE void gemm_lower(float* C, int ld, const float* A, int64_t lda, const float* Bt, int L,
                           int K) {
  int i = 0;
  for (; i + 4 <= L; i += 4)
    gemm_row_tile<4>(C + i * ld, ld, A + i * lda, lda, Bt, ld, round16(i + 4), K, 1.0f, 0.0f);
  for (; i < L; ++i)
    gemm_row_tile<1>(C + i * ld, ld, A + i * lda, lda, Bt, ld, round16(i + 1), K, 1.0f, 0.0f);
}

// C[L, N] = beta·C + P[L, ·]·B[·, N] for lower-triangular P: row i only needs B's rows 0..i,
// so P's entries right of the diagonal are never read except inside a 4-row tile, where they
// must be zero (up to the tile's last row).
GDN_INLINE void gemm_tril(float* C, int64_t ldc, const float* P, int ld, const float* B,
                          int64_t ldb, int L, int N, float beta) {
  const int N16 = N & ~15;
  int i = 0;
  for (; i + 4 <= L; i += 4)
    if (N16 > 0) gemm_row_tile<4>(C + i * ldc, ldc, P + i * ld, ld, B, ldb, N16, i + 4, 1.0f, beta);
  for (; i < L; ++i)
    if (N16 > 0) gemm_row_tile<1>(C + i * ldc, ldc, P + i * ld, ld, B, ldb, N16, i + 1, 1.0f, beta);
  if (N16 < N)
    for (i = 0; i < L; ++i)
      gemm_edge(C + i * ldc + N16, ldc, P + i * ld, ld, B + N16, ldb, 1, N - N16, i + 1, 1.0f,
                beta);
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

// T = (I + A)⁻¹ for strictly lower-triangular A [L, ld], row by row: T_i = e_i − Σ_{j<i} A_ij T_j
// (as transformers builds it). Row i is written over its whole 16-column block, zeros right of
// the diagonal, so that gemm_tril's 4-row tiles read zeros there. ~L³/6 FMAs: small next to
// applying T to [βV | βK⊙e^γ], which then runs as a register-tiled GEMM instead of a
// load-bound row-by-row substitution.
GDN_INLINE void unit_lower_inverse(float* T, const float* A, int ld, int L) {
  for (int i = 0; i < L; ++i) {
    const int nb = round16(i + 1);
    float* t = T + i * ld;
    const v16 lane = v16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int x = 0; x < nb; x += 16) {
      v16 acc = (lane + float(x)) == float(i) ? gdn::splat16(1.0f) : v16{};
      // T_j is zero right of column j, so only rows j ≥ x reach this block.
      for (int j = x; j < i; ++j) acc -= A[i * ld + j] * gdn::load16(T + j * ld + x);
      gdn::store16(t + x, acc);
    }
  }
}

GDN_INLINE void head_chunked(const HeadIo& io, int C, const ChunkScratch& s) {
  const int dk = io.dk, dv = io.dv, w = dv + dk, ld = s.ld;
  float* S = io.state;
  for (int c0 = 0; c0 < io.n; c0 += C) {
    const int L = std::min(C, io.n - c0), Lp = round16(L);
    float* Q = io.q + int64_t(c0) * dk;
    const float* K = io.k + int64_t(c0) * dk;
    const float* V = io.v + int64_t(c0) * dv;
    const float* be = io.beta + c0;
    float cum = 0.0f;  // γ: cumulative log decay within the chunk, summed in order as torch does
    for (int i = 0; i < L; ++i) s.gam[i] = cum += io.g[c0 + i];
    for (int i = L; i < Lp; ++i) s.gam[i] = cum;  // padding: masked out below
    for (int i = 0; i < L; ++i)
      for (int d = 0; d < dk; ++d) s.kt[d * ld + i] = K[i * dk + d];
    for (int d = 0; d < dk; ++d)
      for (int i = L; i < Lp; ++i) s.kt[d * ld + i] = 0.0f;
    gemm_lower(s.qk, ld, Q, dk, s.kt, L, dk);  // Q Kᵀ
    gemm_lower(s.a, ld, K, dk, s.kt, L, dk);   // K Kᵀ
    // P = tril(Q Kᵀ ⊙ Γ) with the diagonal (Γ_ii = 1); A = tril(βKKᵀ ⊙ Γ, -1); Γ_ij = e^{γ_i−γ_j}.
    // Only the computed 16-column blocks are touched; the rest is never read.
    for (int i = 0; i < L; ++i) {
      const int nb = round16(i + 1);
      float* p = s.qk + i * ld;
      float* a = s.a + i * ld;
      for (int j = 0; j < nb; j += 16) {
        const v16 col = v16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + float(j);
        const v16 decay = gdn::exp16(s.gam[i] - gdn::load16(s.gam + j));
        const v16 zero{};
        gdn::store16(p + j, col <= float(i) ? gdn::load16(p + j) * decay : zero);
        gdn::store16(a + j, col < float(i) ? be[i] * gdn::load16(a + j) * decay : zero);
      }
    }
    // R0 = [βV | βK⊙e^γ], then R = (I + A)⁻¹ R0 = [U | W].
    // (An f64 solve was tried: it does not reduce the chunked form's error, which comes from the
    // cancellation in U − W·S, so everything stays f32 as in transformers.)
    for (int i = 0; i < L; i += 16) gdn::store16(s.e + i, gdn::exp16(gdn::load16(s.gam + i)));
    for (int i = 0; i < L; ++i) {
      float* r = s.r0 + int64_t(i) * w;
      const float eg = be[i] * s.e[i];
      for (int j = 0; j < dv; ++j) r[j] = be[i] * V[i * dv + j];
      for (int d = 0; d < dk; ++d) r[dv + d] = eg * K[i * dk + d];
    }
    unit_lower_inverse(s.t, s.a, ld, L);
    gemm_tril(s.r, w, s.t, ld, s.r0, w, L, w, 0.0f);
    // V' = U − W·S, in place over U (columns [0, dv) of R).
    float* Vp = s.r;
    gemm(Vp, w, s.r + dv, w, S, dv, L, dv, dk, -1.0f, 1.0f);
    // O = (Q⊙e^γ)·S + P·V', written straight into the output rows (Q is not needed after).
    for (int i = 0; i < L; ++i)
      for (int d = 0; d < dk; ++d) Q[i * dk + d] *= s.e[i];
    float* O = io.out + int64_t(c0) * io.out_stride;
    gemm(O, io.out_stride, Q, dk, S, dv, L, dv, dk, 1.0f, 0.0f);
    gemm_tril(O, io.out_stride, s.qk, ld, Vp, w, L, dv, 1.0f);
    // S ← e^{γ_L}·S + (K⊙e^{γ_L−γ})ᵀ·V', with Kᵀ scaled in place in kt.
    const float gl = s.gam[L - 1];
    for (int i = 0; i < Lp; i += 16) gdn::store16(s.e + i, gdn::exp16(gl - gdn::load16(s.gam + i)));
    for (int d = 0; d < dk; ++d)
      for (int i = 0; i < L; ++i) s.kt[d * ld + i] *= s.e[i];
    gemm(S, dv, s.kt, ld, Vp, w, dk, dv, L, 1.0f, std::exp(gl));
  }
}

// x · rsqrt(Σx² + 1e-6) in f32, as transformers' l2norm (FLA's convention), times `scale`.
// (The 16-lane sum: an in-order scalar one made this gather a sixth of the chunked op.)
GDN_INLINE void l2_normalise(float* dst, const float* src, int n, float scale) {
  const float inv = 1.0f / std::sqrt(gdn::sum_squares(src, n) + 1e-6f) * scale;
  for (int i = 0; i < n; ++i) dst[i] = src[i] * inv;
}

// Everything one thread needs for its heads.
struct CallArgs {
  const float* qkv;  // [n, row]
  const float* g;    // [n, hv]
  const float* beta;
  float* out;    // [n, hv, dv]
  float* state;  // [hv, dk, dv]
  int64_t row;
  int n, hk, hv, dk, dv, chunk;
  bool chunked;
};

// Gathers head h (normalised q, k; v; its gates) into contiguous buffers and runs it.
GDN_INLINE void run_heads(const CallArgs& c, int64_t h0, int64_t h1, float* qn, float* kn,
                          float* vn, float* gh, float* bh, const ChunkScratch& cs) {
  const int n = c.n, dk = c.dk, dv = c.dv, group = c.hv / c.hk;
  const float q_scale = 1.0f / std::sqrt(float(dk));
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t kh = h / group;
    for (int t = 0; t < n; ++t) {
      const float* r = c.qkv + t * c.row;
      l2_normalise(qn + int64_t(t) * dk, r + kh * dk, dk, q_scale);
      l2_normalise(kn + int64_t(t) * dk, r + int64_t(c.hk) * dk + kh * dk, dk, 1.0f);
      const float* v = r + int64_t(2 * c.hk) * dk + h * dv;
      std::copy(v, v + dv, vn + int64_t(t) * dv);
      gh[t] = c.g[t * c.hv + h];
      bh[t] = c.beta[t * c.hv + h];
    }
    const HeadIo io{
        qn, kn, vn, gh, bh, c.out + h * dv, int64_t(c.hv) * dv, c.state + h * int64_t(dk) * dv,
        n,  dk, dv};
    if (c.chunked)
      head_chunked(io, c.chunk, cs);
    else
      head_recurrent(io);
  }
}

#if defined(__x86_64__)
GDN_TARGET_AVX512 void heads_avx512(const CallArgs& c, int64_t h0, int64_t h1, float* qn, float* kn,
                                    float* vn, float* gh, float* bh, const ChunkScratch& cs) {
  run_heads(c, h0, h1, qn, kn, vn, gh, bh, cs);
}
GDN_TARGET_AVX2 void heads_avx2(const CallArgs& c, int64_t h0, int64_t h1, float* qn, float* kn,
                                float* vn, float* gh, float* bh, const ChunkScratch& cs) {
  run_heads(c, h0, h1, qn, kn, vn, gh, bh, cs);
}
#endif
void heads_baseline(const CallArgs& c, int64_t h0, int64_t h1, float* qn, float* kn, float* vn,
                    float* gh, float* bh, const ChunkScratch& cs) {
  run_heads(c, h0, h1, qn, kn, vn, gh, bh, cs);
}

}  // namespace

const char* gated_delta_isa() {
  switch (gdn::isa()) {
    case gdn::Isa::Avx512:
      return "avx512";
    case gdn::Isa::Avx2:
      return "avx2";
    default:
      return "baseline";
  }
}

void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const GatedDeltaParams& p, ThreadPool& pool) {
  CallArgs c{qkv.as<const float>(),
             g.as<const float>(),
             beta.as<const float>(),
             out.as<float>(),
             state.as<float>(),
             qkv.cols(),
             int(qkv.rows()),
             p.n_k_heads,
             p.n_v_heads,
             p.k_dim,
             p.v_dim,
             std::max(1, p.chunk),
             p.chunked && qkv.rows() > 1};
  pool.parallel_for(c.hv, 1, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    // Strong decays drive e^γ and the state into subnormals, which cost ~100x per operation on
    // x86; flushing them (values below 1.2e-38) changes nothing measurable.
    const unsigned saved_csr = _mm_getcsr();
    _mm_setcsr(saved_csr | 0x8040);  // FTZ | DAZ
#endif
    const int n = c.n, dk = c.dk, dv = c.dv;
    thread_local std::vector<float> io_buf, chunk_buf;
    // q, k, v of one head, then its g and β.
    io_buf.resize(size_t(n) * size_t(2 * dk + dv + 2));
    float* qn = io_buf.data();
    float* kn = qn + int64_t(n) * dk;
    float* vn = kn + int64_t(n) * dk;
    float* gh = vn + int64_t(n) * dv;
    float* bh = gh + n;
    ChunkScratch cs{};
    if (c.chunked) {
      const int C = std::min(c.chunk, n);
      const int64_t ld = round16(C), w = dv + dk;
      chunk_buf.resize(
          size_t(int64_t(dk) * ld + 3 * int64_t(C) * ld + 2 * int64_t(C) * w + 2 * ld));
      float* f = chunk_buf.data();
      cs.ld = int(ld);
      cs.kt = f;
      f += int64_t(dk) * ld;
      cs.qk = f;
      f += int64_t(C) * ld;
      cs.a = f;
      f += int64_t(C) * ld;
      cs.t = f;
      f += int64_t(C) * ld;
      cs.r0 = f;
      f += int64_t(C) * w;
      cs.r = f;
      f += int64_t(C) * w;
      cs.gam = f;
      f += ld;
      cs.e = f;
    }
    switch (gdn::isa()) {
#if defined(__x86_64__)
      case gdn::Isa::Avx512:
        heads_avx512(c, begin, end, qn, kn, vn, gh, bh, cs);
        break;
      case gdn::Isa::Avx2:
        heads_avx2(c, begin, end, qn, kn, vn, gh, bh, cs);
        break;
#endif
      default:
        heads_baseline(c, begin, end, qn, kn, vn, gh, bh, cs);
        break;
    }
#if defined(__x86_64__)
    _mm_setcsr(saved_csr);
#endif
  });
}

}  // namespace hearth::cpu
