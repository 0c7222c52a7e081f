// Tensor-core prefill attention (FlashAttention-2 style) over the paged bf16 KV cache:
// GQA, causal by position, sliding window, softcap, scale; q and out F32/F16/BF16. Same
// semantics as the SIMT kernel of attention.cu, which still serves decode (n_tokens ≤ 8) and
// head dims other than 64/128/256.
//
// Work split: a block of BM/16 warps owns BM consecutive tokens of ONE query head (warp w: rows
// 16w..16w+15). The GQA heads are not packed into M: for prefill the FLOPs per K/V byte a block
// loads are set by BM alone, and packing would only narrow each block's token span. Instead the
// grid is ordered head-fastest, so the `group` blocks sharing a KV head and token tile run
// together and read the same K/V tiles from L2; heavy (late, causal) token tiles launch first.
// The block walks its key range [min lo, max hi] in BN-key tiles of K and V, copied into shared
// memory by cp.async, double buffered (tile j+1 loads while tile j is computed). Per tile:
// S = Q·Kᵀ by mma.m16n8k16 (bf16 in, f32 out), scores in log2 units (scale·log2e folded in,
// or softcap·log2e·tanh(scale·s/softcap)), online softmax in f32 registers (exp2), P rounded to
// bf16 in registers and O += P·V by mma. A warp skips a tile none of its rows sees, and applies the
// per-row mask only on tiles that are not fully inside every one of its rows' ranges.
//
// Key positions: row (token t at position pos) sees positions [max(first, pos-window+1), pos]
// (window 0: [first, pos]); position p lives in row p mod 64 of block p / 64 (common.h, KvDev).
// Cache rows outside the block's range are never read (zero-filled in shared memory).
// Rounding: q and P go through bf16 (K/V already are); accumulation and softmax are f32.
#include <climits>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"

namespace hearth::cuda {

namespace {

struct MmaArgs {
  const void* q;
  void* out;
  void* const* blocks;   // the cache's block table
  int64_t k_off, v_off;  // the layer's keys and values in a block (elements)
  const int32_t* positions;
  const int32_t* first;
  int qdt, odt;
  int n_tokens, n_head, n_head_kv, m_tiles, window;
  float softcap;
  float sc_in;   // softcap > 0: scale / softcap; else unused
  float sc_out;  // softcap > 0: softcap · log2e; else scale · log2e
};

template <int HD, int BM, int BN>
constexpr size_t smem_bytes() {  // Q tile + 2 stages of K and V
  return size_t(BM) * HD * 2 + 2 * 2 * size_t(BN) * HD * 2;
}

template <int HD, int BM, int BN>
__global__ void __launch_bounds__(BM * 2) attention_mma_kernel(MmaArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  constexpr int kThreads = BM * 2;    // BM/16 warps
  constexpr int kCpr = HD / 8;        // 16-byte chunks per row
  constexpr int kNt = BN / 8;         // key n-tiles of S (8 keys each)
  constexpr int kDt = HD / 8;         // dim n-tiles of O (8 dims each)
  constexpr int kKs = HD / 16;        // k-steps of Q·Kᵀ (16 dims each)
  constexpr bool kQRegs = HD <= 128;  // Q fragments kept in registers (HD 256: reread per tile)
  constexpr uint32_t kStage = uint32_t(BN) * HD * 2;
  static_assert((BN * kCpr) % kThreads == 0 && (BM * kCpr) % kThreads == 0, "copy split");
  static_assert(HD % 64 == 0 && BN % 16 == 0, "swizzle needs ≥ 8 chunks per row");

  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_lo[BM], s_hi[BM], s_range[2];
  const uint32_t sq = smem_u32(smem);              // [BM][HD]
  const uint32_t sk = sq + uint32_t(BM) * HD * 2;  // [2][BN][HD]
  const uint32_t sv = sk + 2 * kStage;             // [2][BN][HD]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tg = lane & 3;
  const int h = int(blockIdx.x % unsigned(a.n_head));
  const int t0 = (a.m_tiles - 1 - int(blockIdx.x / unsigned(a.n_head))) * BM;
  const int kvh = h / (a.n_head / a.n_head_kv);
  const int64_t kv_row_elems = int64_t(a.n_head_kv) * HD;  // elements between cache rows
  const int64_t kcol = a.k_off + int64_t(kvh) * HD;
  const int64_t vcol = a.v_off + int64_t(kvh) * HD;

  // 1. Each row's key range [lo, hi] (padding rows past n_tokens: empty), and the block's union.
  if (tid == 0) {
    s_range[0] = INT_MAX;
    s_range[1] = INT_MIN;
  }
  const int first = *a.first;
  int my_lo = INT_MAX, my_hi = INT_MIN;
  if (tid < BM) {
    if (t0 + tid < a.n_tokens) {
      const int pos = a.positions[t0 + tid];
      int64_t lo = first;
      if (a.window > 0) lo = max(lo, int64_t(pos) - a.window + 1);
      my_lo = int(lo);
      my_hi = pos;
    }
    s_lo[tid] = my_lo;
    s_hi[tid] = my_hi;
  }
  __syncthreads();
  if (my_lo <= my_hi) {
    atomicMin(&s_range[0], my_lo);
    atomicMax(&s_range[1], my_hi);
  }

  // 2. Q tile → shared (rows past n_tokens zero). bf16 by cp.async, other dtypes converted.
  if (a.qdt == kBF16) {
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(a.q);
#pragma unroll
    for (int i = 0; i < BM * kCpr / kThreads; ++i) {
      const int x = tid + i * kThreads, r = x / kCpr, c = x % kCpr;
      const bool ok = t0 + r < a.n_tokens;
      const int64_t off = ok ? (int64_t(t0 + r) * a.n_head + h) * HD + c * 8 : 0;
      cp_async16(sq + swz<HD>(r, c), q + off, ok);
    }
  } else {
    for (int x = tid; x < BM * kCpr; x += kThreads) {
      const int r = x / kCpr, c = x % kCpr;
      uint4 pk = make_uint4(0, 0, 0, 0);
      if (t0 + r < a.n_tokens) {
        const int64_t off = (int64_t(t0 + r) * a.n_head + h) * HD + c * 8;
        pk.x = pack_bf16(ld(a.q, a.qdt, off + 0), ld(a.q, a.qdt, off + 1));
        pk.y = pack_bf16(ld(a.q, a.qdt, off + 2), ld(a.q, a.qdt, off + 3));
        pk.z = pack_bf16(ld(a.q, a.qdt, off + 4), ld(a.q, a.qdt, off + 5));
        pk.w = pack_bf16(ld(a.q, a.qdt, off + 6), ld(a.q, a.qdt, off + 7));
      }
      *reinterpret_cast<uint4*>(smem + swz<HD>(r, c)) = pk;
    }
  }
  cp_async_commit();  // group: Q
  __syncthreads();    // s_range final
  const int lo_b = s_range[0], hi_b = s_range[1];
  const int n_kt = lo_b <= hi_b ? (hi_b - lo_b) / BN + 1 : 0;

  // K/V tile j (keys lo_b + j·BN + r) → stage; keys past hi_b are zero-filled, never read.
  auto load_kv = [&](int j, int stage) {
    const int kb = lo_b + j * BN;
#pragma unroll
    for (int i = 0; i < BN * kCpr / kThreads; ++i) {
      const int x = tid + i * kThreads, r = x / kCpr, c = x % kCpr;
      const int kp = kb + r;
      const bool ok = kp <= hi_b;
      const int64_t p = ok ? kp : lo_b;  // a row the block reads anyway (nothing is read)
      const uint32_t d = uint32_t(stage) * kStage + swz<HD>(r, c);
      cp_async16(sk + d, kv_row(a.blocks, kcol + c * 8, kv_row_elems, p), ok);
      cp_async16(sv + d, kv_row(a.blocks, vcol + c * 8, kv_row_elems, p), ok);
    }
  };
  if (n_kt > 0) load_kv(0, 0);
  cp_async_commit();  // group: KV tile 0

  // 3. This warp's rows: which tiles it can skip or must mask. Thread rows r0 = 16w+g, r1 = r0+8
  // (the C-fragment rows). Lanes 0-15 and 16-31 each cover the warp's 16 rows once.
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int lo0 = s_lo[r0], hi0 = s_hi[r0], lo1 = s_lo[r1], hi1 = s_hi[r1];
  int w_first, w_last, w_full_lo, w_full_hi;
  {
    const int rr = warp * 16 + (lane & 15);
    const bool real = t0 + rr < a.n_tokens;
    const int rlo = s_lo[rr], rhi = s_hi[rr];
    // Keys [w_first, w_last] hold everything any row sees; keys in [w_full_lo, w_full_hi] are
    // seen by every real row (an empty real row makes that interval empty: always masked).
    // Padding rows do not count: their output is never stored.
    w_first = real && rlo <= rhi ? rlo : INT_MAX;
    w_last = real && rlo <= rhi ? rhi : INT_MIN;
    w_full_lo = real ? rlo : INT_MIN;
    w_full_hi = real ? rhi : INT_MAX;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) {
      w_first = min(w_first, __shfl_xor_sync(0xffffffffu, w_first, o));
      w_last = max(w_last, __shfl_xor_sync(0xffffffffu, w_last, o));
      w_full_lo = max(w_full_lo, __shfl_xor_sync(0xffffffffu, w_full_lo, o));
      w_full_hi = min(w_full_hi, __shfl_xor_sync(0xffffffffu, w_full_hi, o));
    }
  }

  cp_async_wait<1>();  // Q landed (this thread's copies) …
  __syncthreads();     // … and everyone's
  // Q A-fragments, k-step kk (dims 16kk..16kk+15) of the warp's 16 rows: matrix i of the x4 is
  // (rows 8(i&1).., dims 16kk + 8(i>>1)..), i.e. a[0..3] in the A order above. Lane l addresses
  // matrix l>>3, row (l&7) + 8((l>>3)&1), chunk 2kk + (l>>4).
  const int q_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, q_cb = lane >> 4;
  uint32_t qf[kQRegs ? kKs : 1][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int kk = 0; kk < kKs; ++kk) ldsm_x4(sq + swz<HD>(q_row, 2 * kk + q_cb), qf[kk]);
  }
  // K B-fragments for S (B[k = dim][n = key] = K[key][dim]: lane (g,t) needs K[key g][dims 2t,
  // 2t+1 (+8)], a plain row of K): x4 matrices (keys +0..7, dims lo), (keys +0..7, dims hi),
  // (keys +8..15, dims lo), (keys +8..15, dims hi) → b0,b1 of n-tile 2np and of 2np+1.
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_cb = (lane >> 3) & 1;
  // V B-fragments for O (B[k = key][n = dim] = V[key][dim]: lane (g,t) needs V[keys 2t, 2t+1
  // (+8)][dim g], a column of the stored rows → ldmatrix .trans): x4 matrices (keys +0..7, dims
  // lo), (keys +8..15, dims lo), (keys +0..7, dims hi), (keys +8..15, dims hi) → b0,b1 of dim
  // n-tile 2dp and of 2dp+1.
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_cb = lane >> 4;
  // Every ldmatrix row above is ≡ lane (mod 8), so swz(row, c) = row·HD·2 + (c & ~7)·16 +
  // ((c & 7) ^ (lane & 7))·16, and c & 7 takes 4 values per operand (2i + cb): 4 lane offsets per
  // operand, the rest compile-time (folded into the ldmatrix immediate) — instead of one
  // address register per (k-step, tile).
  uint32_t xk[4], xv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    xk[i] = uint32_t(((2 * i + k_cb) ^ (lane & 7)) << 4);
    xv[i] = uint32_t(((2 * i + v_cb) ^ (lane & 7)) << 4);  // also Q's (q_cb == v_cb)
  }
  const uint32_t k_base = sk + uint32_t(k_row) * HD * 2, v_base = sv + uint32_t(v_row) * HD * 2;
  const uint32_t q_base = sq + uint32_t(q_row) * HD * 2;

  float o[kDt][4];
#pragma unroll
  for (int d = 0; d < kDt; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max (log2 units) of rows r0, r1
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the running sums (2 of 8 cols)

  for (int j = 0; j < n_kt; ++j) {
    const uint32_t stage = uint32_t(j & 1) * kStage;
    if (j + 1 < n_kt) {
      load_kv(j + 1, (j + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();  // tile j landed, j+1 in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int kb = lo_b + j * BN, ke = kb + BN - 1;
    if (ke >= w_first && kb <= w_last) {
      // S = Q·Kᵀ for the warp's 16 rows × BN keys; s[nt] is the C fragment of keys 8nt..8nt+7.
      float s[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKs; ++kk) {
        uint32_t af[4];
        q_fragment<kQRegs>(af, qf, kk, q_base, xv);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldsm_x4(k_base + stage + np * 16 * HD * 2 + (kk >> 2) * 128 + xk[kk & 3], b);
          mma_bf16(s[2 * np], af, b[0], b[1]);
          mma_bf16(s[2 * np + 1], af, b[2], b[3]);
        }
      }
      // Scores in log2 units; the mask only where some row does not see the whole tile.
      if (a.softcap > 0.0f) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] = tanhf(s[nt][e] * a.sc_in) * a.sc_out;
      } else {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] *= a.sc_out;
      }
      if (!(kb >= w_full_lo && ke <= w_full_hi)) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const int kp = kb + nt * 8 + 2 * tg;  // key of c[0] / c[2]; c[1] / c[3] is kp + 1
          if (kp < lo0 || kp > hi0) s[nt][0] = -INFINITY;
          if (kp + 1 < lo0 || kp + 1 > hi0) s[nt][1] = -INFINITY;
          if (kp < lo1 || kp > hi1) s[nt][2] = -INFINITY;
          if (kp + 1 < lo1 || kp + 1 > hi1) s[nt][3] = -INFINITY;
        }
      }
      // Online softmax. A row's 4 threads (same g, t = 0..3) hold its BN columns: max over them
      // by xor-shuffles 1 and 2. A row with nothing seen yet keeps m = -inf and uses 0 as the
      // exponent base, so exp2(-inf - 0) = 0 and no NaN appears.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
      const float corr0 = ex2(m0 - base0), corr1 = ex2(m1 - base1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        s[nt][0] = ex2(s[nt][0] - base0);
        s[nt][1] = ex2(s[nt][1] - base0);
        s[nt][2] = ex2(s[nt][2] - base1);
        s[nt][3] = ex2(s[nt][3] - base1);
        rs0 += s[nt][0] + s[nt][1];
        rs1 += s[nt][2] + s[nt][3];
      }
      l0 = l0 * corr0 + rs0;
      l1 = l1 * corr1 + rs1;
#pragma unroll
      for (int d = 0; d < kDt; ++d) {
        o[d][0] *= corr0;
        o[d][1] *= corr0;
        o[d][2] *= corr1;
        o[d][3] *= corr1;
      }
      // O += P·V. The C fragments of key n-tiles 2kj and 2kj+1 are exactly the A fragment of
      // k-step kj (keys 16kj..16kj+15): A's (row g, cols 2t..) = s[2kj][0,1], (row g+8, cols
      // 2t..) = s[2kj][2,3], (row g, cols 2t+8..) = s[2kj+1][0,1], (row g+8, 2t+8..) =
      // s[2kj+1][2,3]. So P never leaves registers.
#pragma unroll
      for (int kj = 0; kj < BN / 16; ++kj) {
        const uint32_t pa[4] = {pack_bf16(s[2 * kj][0], s[2 * kj][1]),
                                pack_bf16(s[2 * kj][2], s[2 * kj][3]),
                                pack_bf16(s[2 * kj + 1][0], s[2 * kj + 1][1]),
                                pack_bf16(s[2 * kj + 1][2], s[2 * kj + 1][3])};
#pragma unroll
        for (int dp = 0; dp < kDt / 2; ++dp) {
          uint32_t b[4];
          ldsm_x4_trans(v_base + stage + kj * 16 * HD * 2 + (dp >> 2) * 128 + xv[dp & 3], b);
          mma_bf16(o[2 * dp], pa, b[0], b[1]);
          mma_bf16(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the stage computed here is refilled by the next iteration's load
  }
  cp_async_wait<0>();

  // 4. Normalise and store. o[d] holds (row r0, dims 8d+2t, +1) and (row r1, same dims).
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const int ta = t0 + r0, tb = t0 + r1;
  if (a.odt == kF32) {
    float* out = static_cast<float*>(a.out);
    float* pa = out + (int64_t(ta) * a.n_head + h) * HD + 2 * tg;
    float* pb = out + (int64_t(tb) * a.n_head + h) * HD + 2 * tg;
#pragma unroll
    for (int d = 0; d < kDt; ++d) {
      if (ta < a.n_tokens)
        *reinterpret_cast<float2*>(pa + d * 8) = make_float2(o[d][0] * inv0, o[d][1] * inv0);
      if (tb < a.n_tokens)
        *reinterpret_cast<float2*>(pb + d * 8) = make_float2(o[d][2] * inv1, o[d][3] * inv1);
    }
  } else {
    // 16-bit outputs: stage the warp's 16 rows in its own Q rows (same swizzle), then 16-byte
    // coalesced stores. Only this warp ever read those rows.
    __syncwarp();
    const bool bf = a.odt == kBF16;
#pragma unroll
    for (int d = 0; d < kDt; ++d) {
      const float x0 = o[d][0] * inv0, x1 = o[d][1] * inv0, x2 = o[d][2] * inv1,
                  x3 = o[d][3] * inv1;
      *reinterpret_cast<uint32_t*>(smem + swz<HD>(r0, d) + tg * 4) =
          bf ? pack_bf16(x0, x1) : pack_f16(x0, x1);
      *reinterpret_cast<uint32_t*>(smem + swz<HD>(r1, d) + tg * 4) =
          bf ? pack_bf16(x2, x3) : pack_f16(x2, x3);
    }
    __syncwarp();
    uint16_t* out = static_cast<uint16_t*>(a.out);
#pragma unroll
    for (int i = 0; i < 16 * kCpr / 32; ++i) {
      const int x = lane + i * 32, r = warp * 16 + x / kCpr, c = x % kCpr;
      if (t0 + r < a.n_tokens)
        *reinterpret_cast<uint4*>(out + (int64_t(t0 + r) * a.n_head + h) * HD + c * 8) =
            *reinterpret_cast<const uint4*>(smem + swz<HD>(r, c));
    }
  }
#endif
}

// Configurations: (HD, BM, BN). BN 32 for HD 256 keeps Q + 2×(K, V) at 96 KiB, which fits
// sm_89's 99 KiB per block and lets two blocks share an H100/H200 SM.
struct Config {
  int hd, bm, bn;
  void (*kernel)(MmaArgs);
  size_t smem;
  bool ok;
};
template <int HD, int BM, int BN>
constexpr Config config() {
  return Config{HD, BM, BN, &attention_mma_kernel<HD, BM, BN>, smem_bytes<HD, BM, BN>(), false};
}
Config g_configs[] = {config<64, 64, 64>(), config<64, 128, 64>(), config<128, 64, 64>(),
                      config<128, 128, 64>(), config<256, 64, 32>()};

const Config* find_config(int hd, int bm) {
  for (const Config& c : g_configs)
    if (c.hd == hd && c.bm == bm && c.ok) return &c;
  return nullptr;
}

}  // namespace

void attention_mma_init() {
  const size_t optin = mma_smem_optin();
  for (Config& c : g_configs) {
    const size_t static_smem = size_t(c.bm) * 8 + 8;  // s_lo, s_hi, s_range
    c.ok = c.smem + static_smem <= optin;
    if (c.ok) allow_smem(c.kernel, c.smem);
  }
}

bool attention_mma_supported(const Ten& out, const Ten& q, const KvDev& kv,
                             const AttentionParams& p, int block_m) {
  if (!find_config(p.head_dim, block_m)) return false;
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) return false;
  if (q.dtype < kF32 || q.dtype > kBF16 || out.dtype < kF32 || out.dtype > kBF16) return false;
  if (kv.span <= 0 || kv.span > INT32_MAX) return false;
  // The cache's rows are 16-byte aligned (head dims 64/128/256, offsets kept so by the backend).
  return aligned16(q.p) && aligned16(out.p);
}

void attention_mma(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                   const int32_t* positions, const AttentionParams& p, int block_m) {
  const Config* c = find_config(p.head_dim, block_m);
  if (!c) cuda_fail("attention_mma", "unsupported head_dim / block size", __FILE__, __LINE__);
  MmaArgs a{};
  a.q = q.p;
  a.out = out.p;
  a.blocks = kv.blocks;
  a.k_off = kv.k_off;
  a.v_off = kv.v_off;
  a.positions = positions;
  a.first = kv.first;
  a.qdt = q.dtype;
  a.odt = out.dtype;
  a.n_tokens = int(q.d[0]);
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.m_tiles = (a.n_tokens + c->bm - 1) / c->bm;
  a.window = p.window;
  a.softcap = p.softcap;
  log2_score_constants(p.scale, p.softcap, a.sc_in, a.sc_out);
  if (a.n_tokens <= 0) return;
  const unsigned blocks = unsigned(a.m_tiles) * unsigned(p.n_head);
  c->kernel<<<blocks, unsigned(c->bm * 2), c->smem, ctx.stream>>>(a);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
