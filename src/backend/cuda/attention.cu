// Causal softmax attention over the ring-addressed KV cache: GQA, sliding window, softcap, scale.
// One kernel for prefill and decode, FlashAttention-style: a block owns NQ queries (the query
// heads that share one KV head, times T consecutive tokens, so each K/V row read serves all of
// them), walks its key range in 32-key chunks per warp with an online softmax in f32, and merges
// its 4 warps at the end. Decode (n ≤ 8 tokens) also splits the key range across blocks
// (split-K) so that a single token keeps every SM busy; a second kernel merges the splits.
// Positions and the cache's first valid position are read from device memory, and the split
// count depends only on the cache capacity, so a captured decode graph stays valid while the
// sequence grows (until the cache reallocates). K/V are bf16; q and out any float dtype.
// attention() sends prefill (n_tokens > 8) to the tensor-core kernel of attention_mma.cu where
// it applies (head dims 64/128/256, 16-byte aligned operands) and keeps this one for the rest.
#include <algorithm>
#include <atomic>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;

struct AttnArgs {
  const void* q;
  int qdt;
  void* out;
  int odt;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const int32_t* positions;
  const int32_t* first;
  float* ws;  // split partials, or null when the block writes the output itself
  int64_t capacity;
  int n_tokens, n_head, n_head_kv, head_dim;
  int heads_per_block, tokens_per_block, head_chunks;
  int window;
  float scale, softcap;
  int split_len, n_splits;
};

// Shared memory: q [NQ][hd] f32, then per warp (m, l)[NQ] and acc [NQ][hd].
template <int NQ, int DPL>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttnArgs a) {
  extern __shared__ float smem[];
  pdl_trigger();  // launched with launch_pdl: q and the cache come from earlier kernels
  pdl_wait();
  const int hd = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = a.n_head / a.n_head_kv;
  // Block → (token tile, kv head, head chunk).
  int bx = blockIdx.x;
  const int chunk = bx % a.head_chunks;
  bx /= a.head_chunks;
  const int g = bx % a.n_head_kv;
  const int t0 = (bx / a.n_head_kv) * a.tokens_per_block;
  const int h0 = g * group + chunk * a.heads_per_block;
  const int hpb = min(a.heads_per_block, group - chunk * a.heads_per_block);
  const int64_t row = int64_t(a.n_head_kv) * hd;
  const int64_t first = *a.first;

  float* qs = smem;  // [NQ][hd]
  int lo[NQ], hi[NQ];
  bool live[NQ];
  int lo_b = INT_MAX, hi_b = INT_MIN;
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    const int t = t0 + i / hpb;
    live[i] = i < hpb * a.tokens_per_block && t < a.n_tokens;
    lo[i] = 0;
    hi[i] = -1;
    if (live[i]) {
      const int pos = a.positions[t];
      int64_t l = first;
      if (a.window > 0) l = max(l, int64_t(pos) - a.window + 1);
      lo[i] = int(l);
      hi[i] = pos;
      lo_b = min(lo_b, lo[i]);
      hi_b = max(hi_b, hi[i]);
    }
  }
  for (int x = threadIdx.x; x < NQ * hd; x += blockDim.x) {
    const int i = x / hd, d = x - i * hd;
    const int t = t0 + i / hpb, h = h0 + i % hpb;
    const bool ok = i < hpb * a.tokens_per_block && t < a.n_tokens;
    qs[x] = ok ? ld(a.q, a.qdt, (int64_t(t) * a.n_head + h) * hd + d) * a.scale : 0.0f;
  }
  __syncthreads();

  // This split's keys, counted back from the newest: [k_lo, k_hi].
  int k_hi = hi_b - blockIdx.y * a.split_len;
  int k_lo = max(lo_b, k_hi - a.split_len + 1);

  float m[NQ], l[NQ], acc[NQ][DPL];
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) acc[i][e] = 0.0f;
  }
  const bool vec = (hd % 8) == 0;
  for (int base = k_lo + warp * 32; base <= k_hi; base += kWarps * 32) {
    const int kp = base + lane;
    const bool kvalid = kp <= k_hi;
    const int64_t slot = kvalid ? int64_t(kp) % a.capacity : 0;
    const __nv_bfloat16* krow = a.k + slot * row + int64_t(g) * hd;
    float s[NQ];
#pragma unroll
    for (int i = 0; i < NQ; ++i) s[i] = 0.0f;
    if (kvalid) {
      if (vec) {
#pragma unroll 4
        for (int d = 0; d < hd; d += 8) {
          const uint4 kv = *reinterpret_cast<const uint4*>(krow + d);
          const __nv_bfloat162* kb = reinterpret_cast<const __nv_bfloat162*>(&kv);
          float kf[8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(kb[j]);
            kf[2 * j] = f.x;
            kf[2 * j + 1] = f.y;
          }
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const float4 q0 = *reinterpret_cast<const float4*>(qs + i * hd + d);
            const float4 q1 = *reinterpret_cast<const float4*>(qs + i * hd + d + 4);
            s[i] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] +
                    q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
          }
        }
      } else {
        for (int d = 0; d < hd; ++d) {
          const float kf = __bfloat162float(krow[d]);
#pragma unroll
          for (int i = 0; i < NQ; ++i) s[i] += qs[i * hd + d] * kf;
        }
      }
    }
    const int n_keys = min(32, k_hi - base + 1);
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      float sc = s[i];
      if (a.softcap > 0.0f) sc = tanhf(sc / a.softcap) * a.softcap;
      const bool ok = live[i] && kvalid && kp >= lo[i] && kp <= hi[i];
      sc = ok ? sc : -INFINITY;
      const float cmax = warp_max(sc);
      const float m_new = fmaxf(m[i], cmax);
      const float p = m_new == -INFINITY ? 0.0f : __expf(sc - m_new);
      const float corr = m_new == -INFINITY ? 1.0f : __expf(m[i] - m_new);
      l[i] = l[i] * corr + warp_sum(p);
      m[i] = m_new;
#pragma unroll
      for (int e = 0; e < DPL; ++e) acc[i][e] *= corr;
      s[i] = p;
    }
    // P·V: lane owns dims [lane*DPL, lane*DPL + DPL). V rows are loaded 8 keys at a time before
    // use, so their latencies overlap instead of serialising the loop.
    const bool full = lane * DPL + DPL <= hd;
    constexpr int KB = DPL >= 8 ? 4 : 8;  // keys in flight, bounded by registers
    for (int j0 = 0; j0 < n_keys; j0 += KB) {
      float vf[KB][DPL];
#pragma unroll
      for (int jj = 0; jj < KB; ++jj) {
        const int j = j0 + jj;
        const int64_t vslot = int64_t(base + (j < n_keys ? j : 0)) % a.capacity;
        const __nv_bfloat16* vrow = a.v + vslot * row + int64_t(g) * hd + lane * DPL;
#pragma unroll
        for (int e = 0; e < DPL; ++e)
          vf[jj][e] =
              (j < n_keys && (full || lane * DPL + e < hd)) ? __bfloat162float(vrow[e]) : 0.0f;
      }
#pragma unroll
      for (int jj = 0; jj < KB; ++jj) {
#pragma unroll
        for (int i = 0; i < NQ; ++i) {
          const float pj = __shfl_sync(0xffffffffu, s[i], (j0 + jj) & 31);
#pragma unroll
          for (int e = 0; e < DPL; ++e) acc[i][e] += pj * vf[jj][e];
        }
      }
    }
  }

  // Merge the warps: warp w publishes (m, l, acc); thread x then combines one (query, dim).
  __syncthreads();
  float* ml = smem + NQ * hd;          // [kWarps][NQ][2]
  float* accs = ml + kWarps * NQ * 2;  // [kWarps][NQ][hd]
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    if (lane == 0) {
      ml[(warp * NQ + i) * 2] = m[i];
      ml[(warp * NQ + i) * 2 + 1] = l[i];
    }
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int d = lane * DPL + e;
      if (d < hd) accs[(warp * NQ + i) * hd + d] = acc[i][e];
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < NQ * hd; x += blockDim.x) {
    const int i = x / hd, d = x - i * hd;
    const int t = t0 + i / hpb, h = h0 + i % hpb;
    if (!(i < hpb * a.tokens_per_block && t < a.n_tokens)) continue;
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, ml[(w * NQ + i) * 2]);
    float ll = 0.0f, o = 0.0f;
    if (mm != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float c = __expf(ml[(w * NQ + i) * 2] - mm);
        ll += ml[(w * NQ + i) * 2 + 1] * c;
        o += accs[(w * NQ + i) * hd + d] * c;
      }
    }
    const int64_t qi = int64_t(t) * a.n_head + h;
    if (a.ws) {
      float* part = a.ws + (int64_t(blockIdx.y) * a.n_tokens * a.n_head + qi) * (hd + 2);
      part[2 + d] = o;
      if (d == 0) {
        part[0] = mm;
        part[1] = ll;
      }
    } else {
      st(a.out, a.odt, qi * hd + d, ll > 0.0f ? o / ll : 0.0f);
    }
  }
}

// One block per (token, head): merges the splits' (m, l, acc).
__global__ void attention_combine_kernel(void* out, int odt, const float* ws, int64_t n_queries,
                                         int hd, int n_splits) {
  pdl_trigger();
  pdl_wait();
  const int64_t qi = blockIdx.x;
  const int64_t stride = n_queries * (hd + 2);
  float mm = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mm = fmaxf(mm, ws[s * stride + qi * (hd + 2)]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float ll = 0.0f, o = 0.0f;
    if (mm != -INFINITY) {
      for (int s = 0; s < n_splits; ++s) {
        const float* part = ws + s * stride + qi * (hd + 2);
        const float c = __expf(part[0] - mm);
        ll += part[1] * c;
        o += part[2 + d] * c;
      }
    }
    st(out, odt, qi * hd + d, ll > 0.0f ? o / ll : 0.0f);
  }
}

struct Shape {
  int nq, dpl, heads_per_block, tokens_per_block, head_chunks, blocks_x, split_len, n_splits;
};

Shape shape_for(int sm_count, int64_t n_tokens, const AttentionParams& p, int64_t capacity) {
  Shape s{};
  s.dpl = p.head_dim <= 32 ? 1 : p.head_dim <= 64 ? 2 : p.head_dim <= 128 ? 4 : 8;
  const int max_nq = std::min(16, 64 / s.dpl);
  const int group = p.n_head / p.n_head_kv;
  s.heads_per_block = std::min(group, max_nq);
  s.head_chunks = (group + s.heads_per_block - 1) / s.heads_per_block;
  // Decode: one token per block, the split-K supplies the parallelism.
  s.tokens_per_block = n_tokens <= 8 ? 1 : std::max(1, max_nq / s.heads_per_block);
  const int need = s.heads_per_block * s.tokens_per_block;
  s.nq = need <= 4 ? 4 : need <= 8 ? 8 : 16;
  if (s.nq * s.dpl > 64) s.nq = 64 / s.dpl;
  const int64_t tiles = (n_tokens + s.tokens_per_block - 1) / s.tokens_per_block;
  s.blocks_x = int(tiles * p.n_head_kv * s.head_chunks);
  s.split_len = 1 << 30;
  s.n_splits = 1;
  if (n_tokens <= 8) {
    int64_t keys = capacity;
    if (p.window > 0) keys = std::min<int64_t>(keys, p.window + n_tokens);
    const int target = std::clamp((2 * sm_count + s.blocks_x - 1) / s.blocks_x, 1, 64);
    int64_t len = (keys + target - 1) / target;
    // Splits of at least one 32-key chunk: short contexts still spread over many blocks.
    len = std::max<int64_t>(32, (len + 31) / 32 * 32);
    s.split_len = int(len);
    s.n_splits = int((keys + len - 1) / len);
  }
  return s;
}

template <int NQ, int DPL>
void configure() {
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<NQ, DPL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
}

template <int NQ, int DPL>
void launch(Ctx& ctx, const AttnArgs& a, int blocks_x, size_t smem) {
  launch_pdl(ctx, attention_kernel<NQ, DPL>, dim3(unsigned(blocks_x), unsigned(a.n_splits)),
             dim3(kWarps * 32), smem, a);
}

void attention_simt(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                    const int32_t* positions, const AttentionParams& p);

std::atomic<int> g_kernel{int(AttentionKernel::Auto)};

// Query rows per block of the tensor-core kernel. 128-row tiles halve the K/V bytes loaded per
// FLOP but make half as many blocks, and under the causal mask the late tiles carry most of the
// work: use them only when there are several waves of blocks.
int mma_block_m(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p, AttentionKernel k) {
  if (k == AttentionKernel::Mma64) return 64;
  if (k == AttentionKernel::Mma128) return 128;
  const int64_t blocks128 = (n_tokens + 127) / 128 * p.n_head;
  return blocks128 >= 3 * int64_t(ctx.sm_count) ? 128 : 64;
}

}  // namespace

void attention_set_kernel(AttentionKernel k) { g_kernel.store(int(k), std::memory_order_relaxed); }

void attention_init() {
  attention_mma_init();
  configure<4, 1>();
  configure<8, 1>();
  configure<16, 1>();
  configure<4, 2>();
  configure<8, 2>();
  configure<16, 2>();
  configure<4, 4>();
  configure<8, 4>();
  configure<16, 4>();
  configure<4, 8>();
  configure<8, 8>();
}

size_t attention_workspace_bytes(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p,
                                 int64_t capacity) {
  const Shape s = shape_for(ctx.sm_count, n_tokens, p, capacity);
  if (s.n_splits <= 1) return 0;
  return size_t(s.n_splits) * size_t(n_tokens) * size_t(p.n_head) * size_t(p.head_dim + 2) * 4;
}

void attention(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const int32_t* positions,
               const AttentionParams& p) {
  const int64_t n_tokens = q.d[0];
  const auto k = AttentionKernel(g_kernel.load(std::memory_order_relaxed));
  if (n_tokens > 8 && k != AttentionKernel::Simt) {
    int bm = mma_block_m(ctx, n_tokens, p, k);
    if (!attention_mma_supported(out, q, kv, p, bm)) bm = 64;  // e.g. head_dim 256: 64 only
    if (attention_mma_supported(out, q, kv, p, bm))
      return attention_mma(ctx, out, q, kv, positions, p, bm);
  }
  attention_simt(ctx, out, q, kv, positions, p);
}

namespace {

void attention_simt(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                    const int32_t* positions, const AttentionParams& p) {
  const int64_t n_tokens = q.d[0];
  const Shape s = shape_for(ctx.sm_count, n_tokens, p, kv.capacity);
  AttnArgs a{};
  a.q = q.p;
  a.qdt = q.dtype;
  a.out = out.p;
  a.odt = out.dtype;
  a.k = static_cast<const __nv_bfloat16*>(kv.k.p);
  a.v = static_cast<const __nv_bfloat16*>(kv.v.p);
  a.positions = positions;
  a.first = kv.first;
  a.ws = s.n_splits > 1 ? ctx.attn_ws : nullptr;
  a.capacity = kv.capacity;
  a.n_tokens = int(n_tokens);
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.heads_per_block = s.heads_per_block;
  a.tokens_per_block = s.tokens_per_block;
  a.head_chunks = s.head_chunks;
  a.window = p.window;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.split_len = s.split_len;
  a.n_splits = s.n_splits;
  const size_t smem = size_t(s.nq) * p.head_dim * 4 + size_t(kWarps) * s.nq * 2 * 4 +
                      size_t(kWarps) * s.nq * p.head_dim * 4;
  switch (s.nq * 100 + s.dpl) {
    case 401:
      launch<4, 1>(ctx, a, s.blocks_x, smem);
      break;
    case 801:
      launch<8, 1>(ctx, a, s.blocks_x, smem);
      break;
    case 1601:
      launch<16, 1>(ctx, a, s.blocks_x, smem);
      break;
    case 402:
      launch<4, 2>(ctx, a, s.blocks_x, smem);
      break;
    case 802:
      launch<8, 2>(ctx, a, s.blocks_x, smem);
      break;
    case 1602:
      launch<16, 2>(ctx, a, s.blocks_x, smem);
      break;
    case 404:
      launch<4, 4>(ctx, a, s.blocks_x, smem);
      break;
    case 804:
      launch<8, 4>(ctx, a, s.blocks_x, smem);
      break;
    case 1604:
      launch<16, 4>(ctx, a, s.blocks_x, smem);
      break;
    case 408:
      launch<4, 8>(ctx, a, s.blocks_x, smem);
      break;
    case 808:
      launch<8, 8>(ctx, a, s.blocks_x, smem);
      break;
    default:
      cuda_fail("attention", "unsupported head shape", __FILE__, __LINE__);
  }
  HEARTH_CUDA_LAUNCHED();
  if (s.n_splits > 1) {
    launch_pdl(ctx, attention_combine_kernel, dim3(unsigned(n_tokens * p.n_head)), dim3(128), 0,
               out.p, out.dtype, static_cast<const float*>(ctx.attn_ws), n_tokens * p.n_head,
               int(p.head_dim), int(s.n_splits));
    HEARTH_CUDA_LAUNCHED();
  }
}

}  // namespace

}  // namespace hearth::cuda
