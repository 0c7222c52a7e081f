// The chunked form of the gated delta rule for prefill-sized calls (gated_delta.cu has the
// conv, the gates and the recurrent form, and picks this one for prefill).
#include <algorithm>
#include <atomic>

#include "backend/cuda/gated_delta.cuh"

namespace hearth::cuda {

namespace {

// --- chunked form (prefill) ---
//
// transformers' torch_chunk_gated_delta_rule, as the CPU op (cpu/gated_delta.cpp), regrouped so
// that only the state crosses chunks. Chunks of C ≤ 64 tokens are counted from the call's first
// token; a short last chunk is zero-padded to the same size, which changes nothing (padding has
// g = 0, β = 0 and q = k = v = 0). With γ the in-chunk cumulative log decay, Γ_ij = e^{γ_i−γ_j}
// and S the [Dk, 32] state slab:
//   A  = tril(β_i k_i·k_j Γ_ij, −1)     P = tril(q_i·k_j Γ_ij)
//   X  = β ⊙ (V − e^γ ⊙ K·S)
//   V' = (I + A)⁻¹ X                    (the CPU's U − W·S: (I + A)⁻¹ is linear, so it is applied
//                                        once to X instead of forming W = (I + A)⁻¹(βK⊙e^γ))
//   O  = e^γ ⊙ Q·S + P·V'
//   S ← e^{γ_C} S + (K ⊙ e^{γ_C−γ})ᵀ V'
// Work split: a block per (value head, 32 state columns), as the recurrent kernel, walking the
// head's chunks in order with its slab in shared memory. Given the key-side quantities (A, P,
// the solve) the value columns are independent, so each block recomputes those for itself
// (about 40 % of its FLOPs at Dk = 128): sharing them would need global scratch, which a
// launcher does not own.
// Precision: all f32 on the CUDA cores, as the CPU op. The state is a long f32 recurrence held
// to 2e-3 of the CPU's; tf32 or bf16 tensor-core inputs would round k (in K·Kᵀ and K·S) to
// 2^-11 or 2^-9, and that error goes straight into V' and the state — a 3×tf32 split would be
// the way to use them, a follow-up to be measured.
// The solve: the 16×16 diagonal blocks of I + A are inverted one column per thread (registers,
// unrolled), then V' follows block row by block row, V'_r = T_rr (X_r − Σ_{k<r} A_rk V'_k).
// q and k sit un-normalised in shared memory: their squared norms are summed from the same
// panels, and 1/‖q‖·Dk^-½ and 1/‖k‖ scale the products' rows and columns instead.
// Shared memory per block (floats; cp = C rounded up to 16, dp = the key panel, all of Dk where
// it fits): S Dk·32, q and k panels 2·cp·(dp+1), A and P 2·cp·(cp+1), X (V → X → V') and O
// cp·32 each, the solve's 16·32 + cp·16, and 8 vectors of cp — 137 KiB at Dk = 128, C = 64 in
// one panel (sm_90 and sm_80), 89 KiB in panels of 32 (sm_89's 99 KiB). Where even panels of 16
// do not fit, or Dk is not a multiple of 16 or above 256, the recurrent kernel runs instead.

constexpr int kChunkThreads = 256;
constexpr int kMaxChunk = 64;  // longer chunks run as 64: the same result within f32 rounding
constexpr int kTile = 4;       // the products' register tiles are 4×4
constexpr int kColTiles = kCols / kTile;
// Products of a chunk: lower 4×4 tiles of A and P (incl. the diagonal tiles), all of K·S, Q·S.
constexpr int kMaxJobs =
    2 * (kMaxChunk / kTile) * (kMaxChunk / kTile + 1) / 2 + 2 * (kMaxChunk / kTile) * kColTiles;
constexpr int kJobsPerThread = (kMaxJobs + kChunkThreads - 1) / kChunkThreads;
// The block solve gives each thread 2 of a 16-row block's 16×32 values.
static_assert(16 * kCols == 2 * kChunkThreads, "block solve: 2 values per thread");
static_assert(kChunkThreads == 8 * 32, "8 warps");

// Shared-memory layout of the chunked kernel, offsets in floats (host and device agree).
struct ChunkLayout {
  int ldp, lda;  // row strides of the q/k panels (dp+1) and of A, P (cp+1): conflict-free
  int s, q, k, a, p, x, o, y, td;
  int gam, beta, sqq, sqk, rq, rk, eg, f;  // per-token vectors of cp
  int total;
};

__host__ __device__ inline ChunkLayout chunk_layout(int cp, int dk, int dp) {
  ChunkLayout l{};
  l.ldp = dp + 1;
  l.lda = cp + 1;
  int at = 0;
  auto take = [&at](int n) {
    const int o = at;
    at += n;
    return o;
  };
  l.s = take(dk * kCols);
  l.q = take(cp * l.ldp);
  l.k = take(cp * l.ldp);
  l.a = take(cp * l.lda);
  l.p = take(cp * l.lda);
  l.x = take(cp * kCols);
  l.o = take(cp * kCols);
  l.y = take(16 * kCols);
  l.td = take(cp * 16);
  l.gam = take(cp);
  l.beta = take(cp);
  l.sqq = take(cp);
  l.sqk = take(cp);
  l.rq = take(cp);
  l.rk = take(cp);
  l.eg = take(cp);
  l.f = take(cp);
  l.total = at;
  return l;
}

struct ChunkArgs {
  void* out;
  const void* qkv;
  const void* g;
  const void* beta;
  float* state;
  int odt, qdt, gdt, bdt;
  int n, hk, hv, dk, dv;
  int chunk, cp, dp;  // tokens per chunk (≤ 64), that rounded up to 16, key panel width
};

// One block's view: its head, its columns, and its shared arrays.
struct ChunkBlock {
  int h, kh, c0, ldp, lda;
  int64_t row;  // qkv row length
  float *S, *Q, *K, *A, *P, *X, *O, *Y, *Td;
  float *gam, *beta, *sqq, *sqk, *rq, *rk, *eg, *f;
};

__device__ inline ChunkBlock chunk_block(const ChunkArgs& a, float* sm) {
  const ChunkLayout l = chunk_layout(a.cp, a.dk, a.dp);
  ChunkBlock b;
  b.h = blockIdx.x;
  b.kh = b.h / (a.hv / a.hk);
  b.c0 = blockIdx.y * kCols;
  b.ldp = l.ldp;
  b.lda = l.lda;
  b.row = int64_t(2 * a.hk) * a.dk + int64_t(a.hv) * a.dv;
  b.S = sm + l.s;
  b.Q = sm + l.q;
  b.K = sm + l.k;
  b.A = sm + l.a;
  b.P = sm + l.p;
  b.X = sm + l.x;
  b.O = sm + l.o;
  b.Y = sm + l.y;
  b.Td = sm + l.td;
  b.gam = sm + l.gam;
  b.beta = sm + l.beta;
  b.sqq = sm + l.sqq;
  b.sqk = sm + l.sqk;
  b.rq = sm + l.rq;
  b.rk = sm + l.rk;
  b.eg = sm + l.eg;
  b.f = sm + l.f;
  return b;
}

// Global loads are issued kLoadBatch at a time before their shared stores: the compiler cannot
// tell that the stores do not alias the loads, and would otherwise wait for each load in turn.
constexpr int kLoadBatch = 8;

__device__ inline void slab_load(const ChunkArgs& a, const ChunkBlock& b) {
  const float* Sg = a.state + int64_t(b.h) * a.dk * a.dv;
  const int total = a.dk * kCols;
  for (int e0 = threadIdx.x; e0 < total; e0 += kLoadBatch * kChunkThreads) {
    float v[kLoadBatch];
#pragma unroll
    for (int m = 0; m < kLoadBatch; ++m) {
      const int e = e0 + m * kChunkThreads, i = e / kCols, c = b.c0 + e % kCols;
      v[m] = e < total && c < a.dv ? Sg[int64_t(i) * a.dv + c] : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < kLoadBatch; ++m)
      if (e0 + m * kChunkThreads < total) b.S[e0 + m * kChunkThreads] = v[m];
  }
}

__device__ inline void slab_store(const ChunkArgs& a, const ChunkBlock& b) {
  float* Sg = a.state + int64_t(b.h) * a.dk * a.dv;
  for (int e = threadIdx.x; e < a.dk * kCols; e += kChunkThreads) {
    const int i = e / kCols, c = b.c0 + e % kCols;
    if (c < a.dv) Sg[int64_t(i) * a.dv + c] = b.S[e];
  }
}

// The chunk's gates (γ still raw g here: chunk_cumsum sums it) and zeroed norm sums.
__device__ inline void chunk_gates(const ChunkArgs& a, const ChunkBlock& b, int t0, int len) {
  const int i = threadIdx.x;
  if (i < a.cp) {
    const int64_t at = int64_t(t0 + i) * a.hv + b.h;
    b.gam[i] = i < len ? ld(a.g, a.gdt, at) : 0.0f;
    b.beta[i] = i < len ? ld(a.beta, a.bdt, at) : 0.0f;
    b.sqq[i] = 0.0f;
    b.sqk[i] = 0.0f;
  }
}

// γ summed in token order by one thread, as the CPU does, so both see the same decays.
__device__ inline void chunk_cumsum(const ChunkArgs& a, const ChunkBlock& b) {
  if (threadIdx.x != 0) return;
  float cum = 0.0f;
  for (int i = 0; i < a.cp; ++i) b.gam[i] = cum += b.gam[i];
}

// Rows [0, cp) × key columns [p0, p0 + w) of the chunk's q and k into the Q and K panels
// [cp][ldp], un-normalised; rows past the chunk are zero. Flat over the panel (w is any multiple
// of 16), the position stepped without divisions.
__device__ inline void load_qk_panels(const ChunkArgs& a, const ChunkBlock& b, bool with_q, int t0,
                                      int len, int p0, int w) {
  const int64_t qoff = int64_t(b.kh) * a.dk + p0, koff = int64_t(a.hk + b.kh) * a.dk + p0;
  const int di = kChunkThreads / w, dd = kChunkThreads % w;  // one step of kChunkThreads
  int i = threadIdx.x / w, d = threadIdx.x % w;
  while (i < a.cp) {
    float q[kLoadBatch], k[kLoadBatch];
    int at[kLoadBatch];
#pragma unroll
    for (int m = 0; m < kLoadBatch; ++m) {
      const bool in = i < a.cp, real = in && i < len;
      const int64_t base = int64_t(t0 + i) * b.row + d;
      at[m] = in ? i * b.ldp + d : -1;
      q[m] = real && with_q ? ld(a.qkv, a.qdt, base + qoff) : 0.0f;
      k[m] = real ? ld(a.qkv, a.qdt, base + koff) : 0.0f;
      i += di;
      d += dd;
      if (d >= w) {
        d -= w;
        ++i;
      }
    }
#pragma unroll
    for (int m = 0; m < kLoadBatch; ++m)
      if (at[m] >= 0) {
        if (with_q) b.Q[at[m]] = q[m];
        b.K[at[m]] = k[m];
      }
  }
}

// The chunk's v columns of this slab into X [cp][32] (zero past the chunk and past Dv).
__device__ inline void load_v(const ChunkArgs& a, const ChunkBlock& b, int t0, int len) {
  constexpr int kRows = kMaxChunk / (kChunkThreads / 32);  // rows per warp, at most
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t off = int64_t(2 * a.hk) * a.dk + int64_t(b.h) * a.dv + b.c0 + lane;
  const bool col_ok = b.c0 + lane < a.dv;
  float v[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = warp + m * (kChunkThreads / 32);
    v[m] = i < len && col_ok ? ld(a.qkv, a.qdt, int64_t(t0 + i) * b.row + off) : 0.0f;
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = warp + m * (kChunkThreads / 32);
    if (i < a.cp) b.X[i * kCols + lane] = v[m];
  }
}

// Adds the panel's part of every row's squared norm (a warp per row: a fixed order).
__device__ inline void add_row_squares(const ChunkArgs& a, const ChunkBlock& b, int w) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = warp; i < a.cp; i += kChunkThreads / 32) {
    float sq = 0.0f, sk = 0.0f;
    for (int d = lane; d < w; d += 32) {
      const float q = b.Q[i * b.ldp + d], k = b.K[i * b.ldp + d];
      sq += q * q;
      sk += k * k;
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    if (lane == 0) {
      b.sqq[i] += sq;
      b.sqk[i] += sk;
    }
  }
}

// One 4×4 tile of the chunk's products. kind: 0 A (rows of K · columns of Kᵀ), 1 P (Q · Kᵀ),
// 2 K·S, 3 Q·S, −1 none. (ti, tj): tile row and column.
struct Job {
  int kind, ti, tj;
};
enum : int { kJobNone = -1, kJobA = 0, kJobP = 1, kJobKS = 2, kJobQS = 3 };

// Jobs are numbered: lower-triangle tiles of A (row-major), of P, then K·S and Q·S tiles.
__device__ inline Job job_of(int idx, int cp) {
  const int nt = cp / kTile, tri = nt * (nt + 1) / 2, rect = nt * kColTiles;
  if (idx < 2 * tri) {
    const int kind = idx < tri ? kJobA : kJobP;
    const int e = idx - (kind == kJobA ? 0 : tri);
    int ti = 0;
    while ((ti + 1) * (ti + 2) / 2 <= e) ++ti;
    return {kind, ti, e - ti * (ti + 1) / 2};
  }
  idx -= 2 * tri;
  if (idx < 2 * rect) {
    const int kind = idx < rect ? kJobKS : kJobQS;
    const int e = idx - (kind == kJobKS ? 0 : rect);
    return {kind, e / kColTiles, e % kColTiles};
  }
  return {kJobNone, 0, 0};
}

// acc += rows(4) · cols(4) over the panel's w key dimensions. Rows come from the Q or K panel;
// columns from the K panel (transposed: the other token's row) or from the S slab's panel rows.
__device__ __forceinline__ void job_fma(float (&acc)[kTile * kTile], const Job& j,
                                        const ChunkBlock& b, int p0, int w) {
  const bool krow = j.kind == kJobA || j.kind == kJobKS;
  const float* rp = (krow ? b.K : b.Q) + j.ti * kTile * b.ldp;
  const bool kcol = j.kind == kJobA || j.kind == kJobP;
  const float* cq = kcol ? b.K + j.tj * kTile * b.ldp : b.S + p0 * kCols + j.tj * kTile;
  const int sd = kcol ? 1 : kCols, sc = kcol ? b.ldp : 1;  // column strides: per dim, per column
#pragma unroll 4
  for (int d = 0; d < w; ++d) {
    float x[kTile], y[kTile];
#pragma unroll
    for (int r = 0; r < kTile; ++r) x[r] = rp[r * b.ldp + d];
#pragma unroll
    for (int c = 0; c < kTile; ++c) y[c] = cq[d * sd + c * sc];
#pragma unroll
    for (int r = 0; r < kTile; ++r)
#pragma unroll
      for (int c = 0; c < kTile; ++c) acc[r * kTile + c] = fmaf(x[r], y[c], acc[r * kTile + c]);
  }
}

// The normalisation factors, the decays, and the state update's row weights
// f_i = e^{γ_C−γ_i}/‖k_i‖ (γ_C = γ at the last row: padding adds g = 0).
__device__ inline void chunk_factors(const ChunkArgs& a, const ChunkBlock& b, int len) {
  const int i = threadIdx.x;
  if (i >= a.cp) return;
  const float q_scale = 1.0f / sqrtf(float(a.dk));
  const float rq = i < len ? 1.0f / sqrtf(b.sqq[i] + 1e-6f) * q_scale : 0.0f;
  const float rk = i < len ? 1.0f / sqrtf(b.sqk[i] + 1e-6f) : 0.0f;
  b.rq[i] = rq;
  b.rk[i] = rk;
  b.eg[i] = expf(b.gam[i]);
  b.f[i] = rk * expf(b.gam[a.cp - 1] - b.gam[i]);
}

// Writes a finished tile: A and P masked and decayed; K·S turned into X = β(V − e^γ K·S) over
// the V already in X; Q·S into O = e^γ Q·S.
__device__ inline void job_store(const float (&acc)[kTile * kTile], const Job& j,
                                 const ChunkBlock& b) {
#pragma unroll
  for (int r = 0; r < kTile; ++r) {
    const int i = j.ti * kTile + r;
#pragma unroll
    for (int c = 0; c < kTile; ++c) {
      const int col = j.tj * kTile + c;
      const float v = acc[r * kTile + c];
      if (j.kind == kJobA) {
        b.A[i * b.lda + col] =
            col < i ? b.beta[i] * (b.rk[i] * b.rk[col] * v) * expf(b.gam[i] - b.gam[col]) : 0.0f;
      } else if (j.kind == kJobP) {
        b.P[i * b.lda + col] =
            col <= i ? (b.rq[i] * b.rk[col] * v) * expf(b.gam[i] - b.gam[col]) : 0.0f;
      } else if (j.kind == kJobKS) {
        float* x = b.X + i * kCols + col;
        *x = b.beta[i] * (*x - b.eg[i] * (b.rk[i] * v));
      } else if (j.kind == kJobQS) {
        b.O[i * kCols + col] = b.eg[i] * (b.rq[i] * v);
      }
    }
  }
}

// A, P, X and O for the chunk: the products run over the key dimensions panel by panel (one
// panel where q and k fit whole), accumulating in registers. Leaves the last K panel loaded.
__device__ inline void chunk_products(const ChunkArgs& a, const ChunkBlock& b, int t0, int len) {
  Job jobs[kJobsPerThread];
  float acc[kJobsPerThread][kTile * kTile];
#pragma unroll
  for (int s = 0; s < kJobsPerThread; ++s) {
    jobs[s] = job_of(threadIdx.x + s * kChunkThreads, a.cp);
#pragma unroll
    for (int e = 0; e < kTile * kTile; ++e) acc[s][e] = 0.0f;
  }
  for (int p0 = 0; p0 < a.dk; p0 += a.dp) {
    const int w = min(a.dp, a.dk - p0);
    load_qk_panels(a, b, true, t0, len, p0, w);
    if (p0 == 0) load_v(a, b, t0, len);
    __syncthreads();
    if (p0 == 0) chunk_cumsum(a, b);  // reads the gates chunk_gates wrote before the barrier
    add_row_squares(a, b, w);
#pragma unroll
    for (int s = 0; s < kJobsPerThread; ++s)
      if (jobs[s].kind != kJobNone) job_fma(acc[s], jobs[s], b, p0, w);
    __syncthreads();
  }
  chunk_factors(a, b, len);
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kJobsPerThread; ++s)
    if (jobs[s].kind != kJobNone) job_store(acc[s], jobs[s], b);
}

// T_rr = (I + A_rr)⁻¹ for every 16×16 diagonal block r, one column per thread:
// T[i][c] = δ_ic − Σ_{j<i} A[i][j] T[j][c] (the CPU's row recurrence, per column).
__device__ inline void diag_inverses(const ChunkArgs& a, const ChunkBlock& b) {
  if (int(threadIdx.x) >= a.cp) return;
  const int r = threadIdx.x / 16, c = threadIdx.x % 16;
  const float* Ar = b.A + (16 * r) * b.lda + 16 * r;
  float t[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    float v = i == c ? 1.0f : 0.0f;
#pragma unroll
    for (int j = 0; j < i; ++j) v -= Ar[i * b.lda + j] * t[j];  // t[j] = 0 for j < c
    t[i] = v;
  }
  float* T = b.Td + r * 256;
#pragma unroll
  for (int i = 0; i < 16; ++i) T[i * 16 + c] = t[i];
}

// V' = (I + A)⁻¹ X in place over X, a 16-row block at a time:
// Y = X_r − Σ_{k<r} A_rk V'_k, then V'_r = T_rr Y.
__device__ inline void block_solve(const ChunkArgs& a, const ChunkBlock& b) {
  const int i = threadIdx.x / 16, c = 2 * (threadIdx.x % 16);
  for (int r = 0; r < a.cp / 16; ++r) {
    const int row = 16 * r + i;
    const float* Ai = b.A + row * b.lda;
    float y0 = b.X[row * kCols + c], y1 = b.X[row * kCols + c + 1];
    for (int j = 0; j < 16 * r; ++j) {
      y0 -= Ai[j] * b.X[j * kCols + c];
      y1 -= Ai[j] * b.X[j * kCols + c + 1];
    }
    b.Y[i * kCols + c] = y0;
    b.Y[i * kCols + c + 1] = y1;
    __syncthreads();
    const float* T = b.Td + r * 256 + i * 16;
    float v0 = 0.0f, v1 = 0.0f;
    for (int j = 0; j <= i; ++j) {
      v0 += T[j] * b.Y[j * kCols + c];
      v1 += T[j] * b.Y[j * kCols + c + 1];
    }
    b.X[row * kCols + c] = v0;
    b.X[row * kCols + c + 1] = v1;
    __syncthreads();
  }
}

// O + P·V' for one row of the chunk, 4 columns, stored if the row is a real token.
__device__ inline void output_row(const ChunkArgs& a, const ChunkBlock& b, int t0, int len, int i,
                                  int c) {
  float o[kTile];
#pragma unroll
  for (int x = 0; x < kTile; ++x) o[x] = b.O[i * kCols + c + x];
  const float* Pi = b.P + i * b.lda;
  for (int j = 0; j <= i; ++j) {
    const float p = Pi[j];
#pragma unroll
    for (int x = 0; x < kTile; ++x) o[x] = fmaf(p, b.X[j * kCols + c + x], o[x]);
  }
  if (i >= len) return;
  const int64_t base = (int64_t(t0 + i) * a.hv + b.h) * a.dv + b.c0 + c;
#pragma unroll
  for (int x = 0; x < kTile; ++x)
    if (b.c0 + c + x < a.dv) st(a.out, a.odt, base + x, o[x]);
}

// The chunk's outputs. A thread takes rows i and cp−1−i, so every thread sums cp+1 terms.
__device__ inline void chunk_output(const ChunkArgs& a, const ChunkBlock& b, int t0, int len) {
  for (int e = threadIdx.x; e < (a.cp / 2) * kColTiles; e += kChunkThreads) {
    const int i = e / kColTiles, c = (e % kColTiles) * kTile;
    output_row(a, b, t0, len, i, c);
    output_row(a, b, t0, len, a.cp - 1 - i, c);
  }
}

// S ← e^{γ_C} S + Kᵀ (f ⊙ V') for the slab rows [p0, p0 + w) held in the K panel, 4×4 tiles.
__device__ inline void update_state(const ChunkArgs& a, const ChunkBlock& b, int p0, int w) {
  const float decay = expf(b.gam[a.cp - 1]);
  for (int e = threadIdx.x; e < (w / kTile) * kColTiles; e += kChunkThreads) {
    const int d = (e / kColTiles) * kTile, c = (e % kColTiles) * kTile;
    float acc[kTile][kTile] = {};
    for (int i = 0; i < a.cp; ++i) {
      const float fi = b.f[i];
      float kx[kTile], vx[kTile];
#pragma unroll
      for (int r = 0; r < kTile; ++r) kx[r] = b.K[i * b.ldp + d + r];
#pragma unroll
      for (int x = 0; x < kTile; ++x) vx[x] = fi * b.X[i * kCols + c + x];
#pragma unroll
      for (int r = 0; r < kTile; ++r)
#pragma unroll
        for (int x = 0; x < kTile; ++x) acc[r][x] = fmaf(kx[r], vx[x], acc[r][x]);
    }
#pragma unroll
    for (int r = 0; r < kTile; ++r)
#pragma unroll
      for (int x = 0; x < kTile; ++x) {
        float* s = b.S + (p0 + d + r) * kCols + c + x;
        *s = acc[r][x] + decay * *s;
      }
  }
}

// The state update over every key panel; with one panel K is still loaded from the products.
__device__ inline void chunk_state(const ChunkArgs& a, const ChunkBlock& b, int t0, int len) {
  const bool reload = a.dp < a.dk;
  for (int p0 = 0; p0 < a.dk; p0 += a.dp) {
    const int w = min(a.dp, a.dk - p0);
    if (reload) {
      __syncthreads();  // the previous panel (or the products' last one) is no longer read
      load_qk_panels(a, b, false, t0, len, p0, w);
      __syncthreads();
    }
    update_state(a, b, p0, w);
  }
}

// Block (value head, 32 state columns): the slab walks the call's chunks in order.
__global__ void __launch_bounds__(kChunkThreads, 1) gated_delta_chunked_kernel(ChunkArgs a) {
  extern __shared__ float sm[];
  // Only prefill-sized calls come here: the next kernel starts at the end (see kDecodeTokens).
  pdl_wait();
  const ChunkBlock b = chunk_block(a, sm);
  slab_load(a, b);
  for (int t0 = 0; t0 < a.n; t0 += a.chunk) {
    const int len = min(a.chunk, a.n - t0);
    chunk_gates(a, b, t0, len);
    chunk_products(a, b, t0, len);
    __syncthreads();
    diag_inverses(a, b);
    __syncthreads();
    block_solve(a, b);  // ends with a barrier: V' is complete
    chunk_output(a, b, t0, len);
    chunk_state(a, b, t0, len);
    __syncthreads();  // the next chunk overwrites the gates, panels and X
  }
  slab_store(a, b);
}

// Opt-in shared memory per block (bytes), the smallest over the devices set up (gated_delta_init).
std::atomic<int> g_chunk_smem_max{0};

// The widest key panel (a divisor of Dk, multiple of 16: all of Dk where it fits) whose shared
// memory fits the device; 0 where the chunked kernel does not apply (Dk not a multiple of 16 or
// above 256, or not even panels of 16 fit): the recurrent kernel runs then.
int chunk_panel(int cp, int dk) {
  if (dk % 16 != 0 || dk > 256) return 0;
  for (int dp = dk; dp >= 16; dp -= 16)
    if (dk % dp == 0 &&
        size_t(chunk_layout(cp, dk, dp).total) * 4 <= size_t(g_chunk_smem_max.load()))
      return dp;
  return 0;
}

}  // namespace

void gated_delta_chunked_init(int optin) {
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(gated_delta_chunked_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  // Calls size the chunked kernel's panels to the smallest device this process has set up.
  int seen = g_chunk_smem_max.load();
  while ((seen == 0 || optin < seen) && !g_chunk_smem_max.compare_exchange_weak(seen, optin)) {
  }
}

// The chunked kernel for a prefill-sized call; false where it does not apply (see chunk_panel).
// Calls of up to kDecodeTokens tokens (decode, speculative verification) stay recurrent: a few
// recurrent steps cost less than one padded chunk, and they keep the early PDL trigger.
bool gated_delta_chunked(Ctx& ctx, const Ten& out, const Ten& qkv, const Ten& g, const Ten& beta,
                         const Ten& state, const GatedDeltaParams& p) {
  const int n = int(qkv.rows());
  // A call shorter than a chunk is one chunk: the same chunking, less padding.
  const int chunk = std::min({std::max(p.chunk, 1), kMaxChunk, n});
  const int cp = (chunk + 15) / 16 * 16;
  const int dp = chunk_panel(cp, p.k_dim);
  if (dp == 0) return false;
  ChunkArgs a{};
  a.out = out.p;
  a.qkv = qkv.p;
  a.g = g.p;
  a.beta = beta.p;
  a.state = static_cast<float*>(state.p);
  a.odt = out.dtype;
  a.qdt = qkv.dtype;
  a.gdt = g.dtype;
  a.bdt = beta.dtype;
  a.n = n;
  a.hk = p.n_k_heads;
  a.hv = p.n_v_heads;
  a.dk = p.k_dim;
  a.dv = p.v_dim;
  a.chunk = chunk;
  a.cp = cp;
  a.dp = dp;
  const size_t smem = size_t(chunk_layout(cp, p.k_dim, dp).total) * 4;
  const dim3 grid(unsigned(p.n_v_heads), unsigned((p.v_dim + kCols - 1) / kCols));
  launch_pdl(ctx, gated_delta_chunked_kernel, grid, dim3(kChunkThreads), smem, a);
  HEARTH_CUDA_LAUNCHED();
  return true;
}

}  // namespace hearth::cuda
