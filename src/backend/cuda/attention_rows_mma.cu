// Tensor-core decode attention for a step of several sequences (attention_rows: row t is one
// token of its own sequence, over its own paged cache). Same semantics as the SIMT kernel of
// attention.cu, which it replaces where it applies (head dims 64/128/256, GQA groups up to 16).
//
// Why: with many sequences the SIMT kernel has blocks enough without splitting, but it keeps a
// whole K row per lane in registers (240 of them), so two 4-warp blocks fit an SM and each warp
// alternates between waiting for its loads and computing its dot products: about half of the
// H200's bandwidth over long caches. Here the loads are cp.async copies into shared memory,
// several tiles ahead of the compute, and the products run on tensor cores.
//
// Work split: a block owns one (sequence, KV head, split): the group's query heads are the rows
// of a 16-row mma tile (padded with zero rows), so each K/V byte is read once for all of them.
// The block walks its split's keys in tiles of 16·NW keys, copied by cp.async into a ring of ST
// stages; warp w computes keys 16w..16w+15 of every tile: S = Q·Kᵀ (m16n8k16, bf16 in, f32
// out, scores in log2 units), online softmax in f32, P rounded to bf16 in registers, O += P·V.
// The warps' (m, l, O) are merged through shared memory at the end; splits (attention_split.cuh)
// are merged by the last block to finish. Rounding as the prefill kernel: q and P go through
// bf16 (K/V already are); accumulation and softmax are f32.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kRows = 16;  // query heads per block (the mma tile's rows)

struct RowsArgs {
  const void* q;
  const SeqKv* seqs;
  const int32_t* positions;
  int64_t k_off, v_off;  // the layer's keys and values in a block (elements)
  SplitTarget split;     // part null: one split, the output written directly
  int qdt, n_head_kv, window, split_len, n_splits;
  float softcap;
  float sc_in;   // softcap > 0: scale / softcap; else unused
  float sc_out;  // softcap > 0: softcap · log2e; else scale · log2e
};

constexpr float kLn2 = 0.6931471805599453f;

// Shared memory: Q [16][HD] bf16, then ST stages of K and V [16·NW][HD] bf16. The warps' merge
// reuses the stages: O [NW][16][HD + 8] f32 (rows padded against bank conflicts), then split
// weights [16][kMaxSplits].
template <int HD, int NW, int ST>
constexpr size_t rows_smem_bytes() {
  return size_t(kRows) * HD * 2 + 2 * size_t(ST) * (16 * NW) * HD * 2;
}

template <int HD, int NW, int ST>
__global__ void __launch_bounds__(NW * 32) attention_rows_mma_kernel(RowsArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  constexpr int BN = 16 * NW;  // keys per tile
  constexpr int kThreads = NW * 32;
  constexpr int kCpr = HD / 8;        // 16-byte chunks per row
  constexpr int kDt = HD / 8;         // dim n-tiles of O (8 dims each)
  constexpr int kKs = HD / 16;        // k-steps of Q·Kᵀ (16 dims each)
  constexpr bool kQRegs = HD <= 128;  // Q fragments kept in registers (HD 256: reread per tile)
  constexpr uint32_t kStage = uint32_t(BN) * HD * 2;
  constexpr int kORow = HD + 8;  // floats between rows of the merge's O
  static_assert((BN * kCpr) % kThreads == 0, "copy split");
  static_assert(HD % 64 == 0, "swizzle needs ≥ 8 chunks per row");
  static_assert(size_t(NW) * kRows * kORow * 4 + kRows * kMaxSplits * 4 <= 2 * size_t(ST) * kStage,
                "the merge fits in the stages");

  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float s_ml[NW][kRows][2];                // each warp's (m in log2 units, l) per row
  const uint32_t sq = smem_u32(smem);                 // [16][HD]
  const uint32_t sk = sq + uint32_t(kRows) * HD * 2;  // [ST][BN][HD]
  const uint32_t sv = sk + ST * kStage;               // [ST][BN][HD]

  pdl_trigger();  // launched with launch_pdl: q and the caches come from earlier kernels
  pdl_wait();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tg = lane & 3;
  const int t = int(blockIdx.x) / a.n_head_kv, kvh = int(blockIdx.x) % a.n_head_kv;
  const int n_head = a.split.n_head, group = n_head / a.n_head_kv;
  Queries qy;
  qy.t0 = t;
  qy.h0 = kvh * group;
  qy.hpb = group;
  qy.n_live = group;

  // The row's keys [lo, hi]; the span fixes the grid, the length how many splits have keys.
  const SeqKv sq_kv = a.seqs[t];
  const int pos = a.positions[t];
  int lo = sq_kv.first;
  if (a.window > 0) lo = max(lo, pos - a.window + 1);
  const int hi = pos;
  int n_used = 1;
  if (a.split.part && lo <= hi) n_used = min(a.n_splits, (hi - lo) / a.split_len + 1);
  if (int(blockIdx.y) >= n_used) return;  // uniform over the block
  const bool split = a.split.part && n_used > 1;
  int k_hi = -1, k_lo = 0;  // this split's keys, counted back from the newest
  if (lo <= hi) {
    k_hi = hi - int(blockIdx.y) * a.split_len;
    k_lo = max(lo, k_hi - a.split_len + 1);
  }
  const int n_kt = k_lo <= k_hi ? (k_hi - k_lo) / BN + 1 : 0;

  void* const* blocks = sq_kv.blocks;
  const int64_t row = int64_t(a.n_head_kv) * HD;  // elements between cache rows
  const int64_t kcol = a.k_off + int64_t(kvh) * HD, vcol = a.v_off + int64_t(kvh) * HD;
  // K/V tile j (keys k_lo + j·BN + r) → its stage; keys past k_hi are zero-filled, never read.
  auto load_kv = [&](int j) {
    const int kb = k_lo + j * BN;
    const uint32_t stage = uint32_t(j % ST) * kStage;
#pragma unroll
    for (int i = 0; i < BN * kCpr / kThreads; ++i) {
      const int x = tid + i * kThreads, r = x / kCpr, c = x % kCpr;
      const bool ok = kb + r <= k_hi;
      const int64_t p = ok ? kb + r : k_lo;  // a row the block reads anyway (nothing is read)
      const uint32_t d = stage + swz<HD>(r, c);
      cp_async16(sk + d, kv_row(blocks, kcol + c * 8, row, p), ok);
      cp_async16(sv + d, kv_row(blocks, vcol + c * 8, row, p), ok);
    }
  };
  // The first ST - 1 tiles go out before Q is staged; one commit group per tile, empty ones
  // included, so that "all but the newest ST - 2 groups" always means "tile j has landed".
#pragma unroll
  for (int j = 0; j < ST - 1; ++j) {
    if (j < n_kt) load_kv(j);
    cp_async_commit();
  }
  // Q rows (the group's heads; rows past it zero) → bf16, unscaled (the scale is applied to the
  // f32 scores).
  for (int x = tid; x < kRows * kCpr; x += kThreads) {
    const int r = x / kCpr, c = x % kCpr;
    uint4 pk = make_uint4(0, 0, 0, 0);
    if (r < group) {
      const int64_t off = qy.index(r, n_head) * HD + c * 8;
      pk.x = pack_bf16(ld(a.q, a.qdt, off + 0), ld(a.q, a.qdt, off + 1));
      pk.y = pack_bf16(ld(a.q, a.qdt, off + 2), ld(a.q, a.qdt, off + 3));
      pk.z = pack_bf16(ld(a.q, a.qdt, off + 4), ld(a.q, a.qdt, off + 5));
      pk.w = pack_bf16(ld(a.q, a.qdt, off + 6), ld(a.q, a.qdt, off + 7));
    }
    *reinterpret_cast<uint4*>(smem + swz<HD>(r, c)) = pk;
  }
  __syncthreads();

  // Fragment addressing as in attention_mma.cu: Q A-fragments by ldmatrix x4 (matrix l>>3: rows
  // (l&7) + 8((l>>3)&1), chunk 2kk + (l>>4)); K B-fragments of the warp's 16 keys (rows of K);
  // V B-fragments by ldmatrix .trans. Every row is ≡ lane (mod 8), so the swizzle is 4 lane
  // offsets per operand and the rest compile-time.
  const int q_row = (lane & 7) + ((lane >> 3) & 1) * 8, q_cb = lane >> 4;
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_cb = (lane >> 3) & 1;
  uint32_t xk[4], xv[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    xk[i] = uint32_t(((2 * i + k_cb) ^ (lane & 7)) << 4);
    xv[i] = uint32_t(((2 * i + q_cb) ^ (lane & 7)) << 4);  // V's and Q's (v_cb == q_cb)
  }
  const uint32_t q_base = sq + uint32_t(q_row) * HD * 2;
  const uint32_t k_base = sk + uint32_t(16 * warp + k_row) * HD * 2;
  const uint32_t v_base = sv + uint32_t(16 * warp + q_row) * HD * 2;
  uint32_t qf[kQRegs ? kKs : 1][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int kk = 0; kk < kKs; ++kk) ldsm_x4(q_base + (kk >> 2) * 128 + xv[kk & 3], qf[kk]);
  }

  float o[kDt][4];
#pragma unroll
  for (int d = 0; d < kDt; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max (log2 units) of rows g, g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the running sums

  for (int j = 0; j < n_kt; ++j) {
    cp_async_wait<ST - 2>();  // tile j landed (this thread's copies) …
    __syncthreads();          // … everyone's, and tile j - 1's stage is free to refill
    if (j + ST - 1 < n_kt) load_kv(j + ST - 1);
    cp_async_commit();
    const int kb = k_lo + j * BN + 16 * warp;  // the warp's first key
    if (kb > k_hi) continue;                   // warp-uniform: the last tile's tail
    const uint32_t stage = uint32_t(j % ST) * kStage;
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kKs; ++kk) {
      uint32_t af[4];
      q_fragment<kQRegs>(af, qf, kk, q_base, xv);
      uint32_t b[4];
      ldsm_x4(k_base + stage + (kk >> 2) * 128 + xk[kk & 3], b);
      mma_bf16(s[0], af, b[0], b[1]);
      mma_bf16(s[1], af, b[2], b[3]);
    }
    // Scores in log2 units; keys past k_hi (only in the split's last tile) masked.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e];
        x = a.softcap > 0.0f ? tanhf(x * a.sc_in) * a.sc_out : x * a.sc_out;
        s[nt][e] = kb + nt * 8 + 2 * tg + (e & 1) <= k_hi ? x : -INFINITY;
      }
    }
    // Online softmax: a row's 4 threads (same g) hold its 16 columns. The warp's first key is
    // seen by every row, so the max is finite from the first tile on.
    float mx0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    float mx1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float corr0 = ex2(m0 - mn0), corr1 = ex2(m1 - mn1);  // ex2(-inf) = 0
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = ex2(s[nt][0] - mn0);
      s[nt][1] = ex2(s[nt][1] - mn0);
      s[nt][2] = ex2(s[nt][2] - mn1);
      s[nt][3] = ex2(s[nt][3] - mn1);
    }
    l0 = l0 * corr0 + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
    l1 = l1 * corr1 + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
    // O += P·V: the two key n-tiles' C fragments are the A fragment of one 16-key k-step.
    const uint32_t pa[4] = {pack_bf16(s[0][0], s[0][1]), pack_bf16(s[0][2], s[0][3]),
                            pack_bf16(s[1][0], s[1][1]), pack_bf16(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < kDt / 2; ++dp) {
      o[2 * dp][0] *= corr0;
      o[2 * dp][1] *= corr0;
      o[2 * dp][2] *= corr1;
      o[2 * dp][3] *= corr1;
      o[2 * dp + 1][0] *= corr0;
      o[2 * dp + 1][1] *= corr0;
      o[2 * dp + 1][2] *= corr1;
      o[2 * dp + 1][3] *= corr1;
      uint32_t b[4];
      ldsm_x4_trans(v_base + stage + (dp >> 2) * 128 + xv[dp & 3], b);
      mma_bf16(o[2 * dp], pa, b[0], b[1]);
      mma_bf16(o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: the merge reuses them

  // Merge the warps: warp w publishes (m, l, O) of its rows; thread x then combines one
  // (head, dim) in warp order.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (tg == 0) {
    s_ml[warp][g][0] = m0;
    s_ml[warp][g][1] = l0;
    s_ml[warp][g + 8][0] = m1;
    s_ml[warp][g + 8][1] = l1;
  }
  float* os = reinterpret_cast<float*>(smem);  // [NW][16][kORow]
#pragma unroll
  for (int d = 0; d < kDt; ++d) {
    float* r0 = os + (warp * kRows + g) * kORow + 8 * d + 2 * tg;
    *reinterpret_cast<float2*>(r0) = make_float2(o[d][0], o[d][1]);
    *reinterpret_cast<float2*>(r0 + 8 * kORow) = make_float2(o[d][2], o[d][3]);
  }
  __syncthreads();
  for (int x = tid; x < group * HD; x += kThreads) {
    const int i = x / HD, d = x % HD;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) mm = fmaxf(mm, s_ml[w][i][0]);
    float ll = 0.0f, ov = 0.0f;
    if (mm != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float c = ex2(s_ml[w][i][0] - mm);
        ll += s_ml[w][i][1] * c;
        ov += os[(w * kRows + i) * kORow + d] * c;
      }
    }
    const int64_t qi = qy.index(i, n_head);
    if (split)  // the merge weighs splits by exp(m_s - m): natural-log units
      store_partial(a.split, int(blockIdx.y), qi, d, mm * kLn2, ll, ov);
    else
      st(a.split.out, a.split.odt, qi * HD + d, ll > 0.0f ? ov / ll : 0.0f);
  }
  if (split) {
    float* wts = os + NW * kRows * kORow;  // past the O rows, which the merge still reads
    merge_splits<kRows, HD, kThreads>(a.split, qy, wts, n_used);
  }
#endif
}

// Configurations by head dim: (warps, stages). Two blocks share an SM, each keeping ST - 1 tiles
// of K and V in flight (64 KiB at head dim 128) while it computes one.
struct Config {
  int hd;
  void (*kernel)(RowsArgs);
  int threads;
  size_t smem;
  bool ok;
};
template <int HD, int NW, int ST>
constexpr Config config() {
  return Config{HD, &attention_rows_mma_kernel<HD, NW, ST>, NW * 32, rows_smem_bytes<HD, NW, ST>(),
                false};
}
Config g_configs[] = {config<64, 4, 4>(), config<128, 4, 3>(), config<256, 2, 3>()};

const Config* find_config(int hd) {
  for (const Config& c : g_configs)
    if (c.hd == hd && c.ok) return &c;
  return nullptr;
}

}  // namespace

void attention_rows_mma_init() {
  const size_t optin = mma_smem_optin();
  for (Config& c : g_configs) {
    const size_t static_smem = size_t(c.threads / 32) * kRows * 2 * 4 + 16;  // s_ml, merge flag
    c.ok = c.smem + static_smem <= optin;
    if (c.ok) allow_smem(c.kernel, c.smem);
  }
}

bool attention_rows_mma_supported(const Ten& out, const Ten& q, const KvDev& kv,
                                  const AttentionParams& p) {
  if (!find_config(p.head_dim)) return false;
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0 || p.n_head / p.n_head_kv > kRows)
    return false;
  if (q.dtype < kF32 || q.dtype > kBF16 || out.dtype < kF32 || out.dtype > kBF16) return false;
  // cp.async copies 16-byte chunks: the layer's rows must start on 16 bytes.
  return kv.k_off % 8 == 0 && kv.v_off % 8 == 0;
}

void attention_rows_mma(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const SeqKv* seqs,
                        const int32_t* positions, const AttentionParams& p, int split_len,
                        int n_splits) {
  const Config* c = find_config(p.head_dim);
  if (!c) cuda_fail("attention_rows_mma", "unsupported head_dim", __FILE__, __LINE__);
  const int64_t n_tokens = q.d[0];
  if (n_tokens <= 0) return;
  RowsArgs a{};
  a.q = q.p;
  a.qdt = q.dtype;
  a.seqs = seqs;
  a.positions = positions;
  a.k_off = kv.k_off;
  a.v_off = kv.v_off;
  a.split.out = out.p;
  a.split.odt = out.dtype;
  a.split.n_tokens = int(n_tokens);
  a.split.n_head = p.n_head;
  a.split.head_dim = p.head_dim;
  if (n_splits > 1) {
    a.split.arrived = reinterpret_cast<unsigned*>(ctx.attn_ws);
    a.split.part = ctx.attn_ws + kAttentionCounterBytes / 4;
  }
  a.n_head_kv = p.n_head_kv;
  a.window = p.window;
  a.split_len = split_len;
  a.n_splits = n_splits;
  a.softcap = p.softcap;
  log2_score_constants(p.scale, p.softcap, a.sc_in, a.sc_out);
  const dim3 grid(unsigned(n_tokens * p.n_head_kv), unsigned(n_splits));
  launch_pdl(ctx, c->kernel, grid, dim3(unsigned(c->threads)), c->smem, a);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
