// Backend::gated_delta_mixer for one token in one kernel (sm_90): the conv + SiLU, the gates, the
// delta rule and the gated RMSNorm of a Gated DeltaNet layer's decode step, which as four
// launches cost ~20 µs per linear layer of the 9B's decode graph (PERFORMANCE.md).
//
// Work split. A block owns one value head's 32-column slab of the recurrent state [Dk, 32] f32,
// as the recurrent gated_delta kernel does: the state is the only large thing read (2 MB per 9B
// layer, read and written once), and 32-column slabs give the 9B shape 128 blocks on 132 SMs,
// where a block per value head (32 blocks) or per key head (16) would pull 64-128 KB through
// each of a quarter of the SMs. Everything else a block needs is small and recomputed per
// block: the conv of its key head's q and k channels (2·Dk) and of its slab's 32 v channels
// (every channel is independent), the L2 norms, and its head's two gates. Two things cross
// blocks, and a thread-block cluster (sm_90) covers both: the cluster is the key head's
// ratio · n_slab blocks (ratio = Hv/Hk value heads share a key head; 8 on the 9B shape).
// - The gated norm needs the sum of squares over the value head's Dv outputs: each block pushes
//   its slab's partial into every sibling slab's shared memory (distributed shared memory), one
//   cluster barrier, then every block sums the partials in the same order (same bits).
// - The q/k channels' conv state is read by every block of the cluster: one block (rank 0)
//   writes their new state after that barrier, when every reader has read it. The v channels'
//   state belongs to one block and is written as soon as it is read.
// Thread layout: 256 threads = 32 row lanes × 8 column quads; a thread holds rows r, r+32, ...
// (RPT of them, Dk ≤ 32·RPT) × 4 columns in registers, loaded and stored as float4 (a warp moves
// four whole 128-byte row segments per access), all RPT loads in flight at once together with
// the conv inputs. Column sums over the rows (Sᵀk, Sᵀq) go through shuffles within a warp, then
// shared memory across the 8 warps.
// Numerics: the four ops' expressions in f32 (conv_token, gates_kernel, gated_delta_kernel,
// the gated norm), values rounded where those ops store them (the scratch dtypes); only the
// summation order of the column sums and the sums of squares differs.
// Launched with programmatic dependent launch: nothing is read before pdl_wait; the state slab
// is only prefetched into L2 before it (a hint, right whatever wrote the state last).
#include <cooperative_groups.h>

#include "backend/cuda/gated_delta.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kQuads = kCols / 4;             // column quads per slab: 8
constexpr int kRowLanes = kThreads / kQuads;  // 32
constexpr int kWarps = kThreads / 32;         // 8
constexpr int kMaxTaps = 4;                   // conv taps (4 in every checkpoint seen)
constexpr int kMaxSlabs = 8;                  // Dv ≤ 256
constexpr int kMaxCluster = 16;               // non-portable above 8 (sm_90 allows 16)
constexpr int kRpts[] = {1, 2, 4, 8};         // the kernel's instances: Dk ≤ 32, 64, 128, 256
int g_max_cluster[4] = {0, 0, 0, 0};          // per instance, from gated_delta_mixer_init

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#endif

// A column quad's float4 summed over the warp's row lanes (lane = 8·(row_lane % 4) + quad, so
// the lanes holding one quad are kQuads apart), the sum in each of them.
__device__ __forceinline__ float4 sum_warp_rows(float4 v) {
#pragma unroll
  for (int o = kQuads; o < 32; o <<= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    v.z += __shfl_xor_sync(0xffffffffu, v.z, o);
    v.w += __shfl_xor_sync(0xffffffffu, v.w, o);
  }
  return v;
}

// Channel c's new conv state after one token: rows 1..K-2 of the old state move up, x is last.
__device__ __forceinline__ void conv_new_state(const Ten& state, int64_t c, int64_t C, int K,
                                               const float (&tap)[kMaxTaps - 1], float x) {
#pragma unroll
  for (int r = 0; r < kMaxTaps - 1; ++r)
    if (r < K - 1) st(state.p, state.dtype, r * C + c, r + 1 < K - 1 ? tap[r + 1] : x);
}

// Grid (ratio · n_slab, Hk, rows), cluster (ratio · n_slab, 1, 1): block x of key head y serves
// value head y·ratio + x / n_slab, columns 32·(x % n_slab) onward, of row (sequence) z.
template <int RPT>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_mixer_kernel(GdnMixerArgs a, int ratio, int n_slab, int K, int64_t C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kChan = (2 * 32 * RPT + kCols + kThreads - 1) / kThreads;  // channels per thread
  __shared__ float qs[32 * RPT], ks[32 * RPT];
  __shared__ __align__(16) float vs[kCols];  // read as float4
  __shared__ float4 red_mem[kWarps][kQuads], red_out[kWarps][kQuads];
  __shared__ float part[2][kWarps];
  __shared__ float ss_slab[kMaxSlabs];  // the value head's slabs' sums of squares, by slab
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  // Siblings write into ss_slab: every block must have started before the first remote store.
  cluster_arrive_relaxed();
  pdl_trigger();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rank = int(blockIdx.x), kh = int(blockIdx.y);
  const int vh = rank / n_slab, slab = rank % n_slab;
  const int hk = a.hk, dk = a.dk, dv = a.dv;
  const int h = kh * ratio + vh, c0 = slab * kCols;
  const int quad = tid % kQuads, row_lane = tid / kQuads;
  const int col = c0 + 4 * quad;
  const bool col_ok = col < dv;  // dv % 4 == 0: a quad is wholly in or out
  // This block's row: its inputs' offsets, and its sequence's states (the table is host data of
  // the step, copied before it: readable before pdl_wait).
  const int64_t row = blockIdx.z, hvdv = int64_t(a.hv) * dv;
  Ten conv_state = a.conv_state;
  float* state = static_cast<float*>(a.state.p);
  if (a.n_rows > 0) {
    state = static_cast<float*>(a.states[2 * row]);
    conv_state.p = a.states[2 * row + 1];
  }
  float* const Sg = state + int64_t(h) * dk * dv + col;
  // The state slab into L2 while the input projection still runs: a hint only, so it is right
  // whoever wrote the state last, and the loads after the wait hit L2 (+0.3–0.6 % on the
  // 9B).
  if (col_ok)
#pragma unroll
    for (int u = 0; u < RPT; ++u) {
      const int i = row_lane + u * kRowLanes;
      if (i < dk) asm volatile("prefetch.global.L2 [%0];" ::"l"(Sg + int64_t(i) * dv));
    }
  pdl_wait();
  const int q_at = kh * dk, k_at = (hk + kh) * dk, v_at = 2 * hk * dk + h * dv + c0;

  // --- every load goes out first: conv inputs, state slab, gates, the norm's gain and gate ---
  float xin[kChan], tap[kChan][kMaxTaps - 1], wt[kChan][kMaxTaps];
  int chan[kChan];  // the channel's index in the row (C < 2^31), -1 for none
#pragma unroll
  for (int m = 0; m < kChan; ++m) {
    const int j = tid + m * kThreads;  // 0..dk-1: q, dk..2dk-1: k, then the slab's v
    int c = -1;
    if (j < dk)
      c = q_at + j;
    else if (j < 2 * dk)
      c = k_at + (j - dk);
    else if (j - 2 * dk < kCols && c0 + (j - 2 * dk) < dv)
      c = v_at + (j - 2 * dk);
    chan[m] = c;
    xin[m] = c >= 0 ? ld(a.qkv.p, a.qkv.dtype, row * C + c) : 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxTaps - 1; ++r)
      tap[m][r] = c >= 0 && r < K - 1 ? ld(conv_state.p, conv_state.dtype, r * C + c) : 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxTaps; ++r)
      wt[m][r] = c >= 0 && r < K ? ld(a.conv_w.p, a.conv_w.dtype, r * C + c) : 0.0f;
  }

  float4 S[RPT];
#pragma unroll
  for (int u = 0; u < RPT; ++u) {
    const int i = row_lane + u * kRowLanes;
    S[u] = col_ok && i < dk ? *reinterpret_cast<const float4*>(Sg + int64_t(i) * dv)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  const float za = ld(a.a.p, a.a.dtype, row * a.hv + h) + ld(a.dt_bias.p, a.dt_bias.dtype, h);
  const float a_log = ld(a.a_log.p, a.a_log.dtype, h);
  const float b_in = ld(a.b.p, a.b.dtype, row * a.hv + h);

  // The 8 threads of row lane 0 finish the slab's 32 outputs (a quad each).
  const bool finisher = row_lane == 0 && col_ok;
  float gw[4], gz[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    gw[e] = finisher ? ld(a.norm_w.p, a.norm_w.dtype, col + e) : 0.0f;
    gz[e] = finisher ? ld(a.z.p, a.z.dtype, row * hvdv + int64_t(h) * dv + col + e) : 0.0f;
  }

  // --- conv + SiLU (conv_token's arithmetic), the q/k sums of squares, the v channels' state ---
  float pq = 0.0f, pk = 0.0f;
#pragma unroll
  for (int m = 0; m < kChan; ++m) {
    const int j = tid + m * kThreads;
    if (chan[m] < 0) {
      if (j >= 2 * dk && j - 2 * dk < kCols) vs[j - 2 * dk] = 0.0f;
      continue;
    }
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxTaps; ++r)
      if (r < K) acc += wt[m][r] * (r < K - 1 ? tap[m][r] : xin[m]);
    const float y = rounded(a.conv_dt, acc * sigmoid_f(acc));
    if (j < dk) {
      qs[j] = y;
      pq += y * y;
    } else if (j < 2 * dk) {
      ks[j - dk] = y;
      pk += y * y;
    } else {
      vs[j - 2 * dk] = y;
      // This block is the only reader of its v channels: their new state goes out now.
      conv_new_state(conv_state, chan[m], C, K, tap[m], xin[m]);
    }
  }
  pq = warp_sum(pq);
  pk = warp_sum(pk);
  if (lane == 0) {
    part[0][warp] = pq;
    part[1][warp] = pk;
  }

  // --- gates (gates_kernel), rounded as the g / beta scratch would hold them ---
  const float sp = za > 20.0f ? za : log1pf(expf(za));
  const float decay = expf(rounded(a.g_dt, -expf(a_log) * sp));
  const float bt = rounded(a.beta_dt, sigmoid_f(b_in));

  __syncthreads();  // qs, ks, vs, part
  float sq = 0.0f, sk = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    sq += part[0][w];
    sk += part[1][w];
  }
  // L2 norms with eps 1e-6 inside the sqrt, q scaled by Dk^-1/2 (as gated_delta_kernel).
  const float iq = rsqrtf(sq + 1e-6f) * rsqrtf(float(dk)), ik = rsqrtf(sk + 1e-6f);

  // --- delta rule on the slab: S ← e^g·S; mem = Sᵀk; δ = β(v − mem); S += k δᵀ; o = Sᵀq ---
  float4 mem = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int u = 0; u < RPT; ++u) {
    const int i = row_lane + u * kRowLanes;
    if (i < dk) {
      const float kv = ks[i];
      S[u].x *= decay;
      S[u].y *= decay;
      S[u].z *= decay;
      S[u].w *= decay;
      add_scaled4(mem, S[u], kv, ik);
    }
  }
  // Row lanes 4w..4w+3 share warp w: sum them, then the warps.
  mem = sum_warp_rows(mem);
  if (lane < kQuads) red_mem[warp][lane] = mem;
  __syncthreads();
  mem = red_mem[0][quad];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float4 p = red_mem[w][quad];
    mem.x += p.x;
    mem.y += p.y;
    mem.z += p.z;
    mem.w += p.w;
  }
  const float4 v = *reinterpret_cast<const float4*>(&vs[4 * quad]);
  const float4 delta =
      make_float4(bt * (v.x - mem.x), bt * (v.y - mem.y), bt * (v.z - mem.z), bt * (v.w - mem.w));
  float4 out = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int u = 0; u < RPT; ++u) {
    const int i = row_lane + u * kRowLanes;
    if (i < dk) {
      const float kv = ks[i], qv = qs[i];
      S[u].x = S[u].x + kv * ik * delta.x;
      S[u].y = S[u].y + kv * ik * delta.y;
      S[u].z = S[u].z + kv * ik * delta.z;
      S[u].w = S[u].w + kv * ik * delta.w;
      if (col_ok) *reinterpret_cast<float4*>(Sg + int64_t(i) * dv) = S[u];
      add_scaled4(out, S[u], qv, iq);
    }
  }
  out = sum_warp_rows(out);
  if (lane < kQuads) red_out[warp][lane] = out;
  __syncthreads();

  // --- gated norm: the slab's outputs (rounded as the core scratch would hold them), their sum
  // of squares shared with the sibling slabs, then y = o · rsqrt(mean + eps) · w · silu(z) ---
  float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
  if (warp == 0) {
    if (finisher) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float4 p = red_out[w][quad];
        o4[0] += p.x;
        o4[1] += p.y;
        o4[2] += p.z;
        o4[3] += p.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) o4[e] = rounded(a.core_dt, o4[e]);
    }
    ss = o4[0] * o4[0] + o4[1] * o4[1] + o4[2] * o4[2] + o4[3] * o4[3];
#pragma unroll
    for (int o = 1; o < kQuads; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  cluster_wait();  // every sibling has started (the relaxed arrive at the top)
  if (tid == 0)
    for (int s = 0; s < n_slab; ++s) *cluster.map_shared_rank(&ss_slab[slab], vh * n_slab + s) = ss;
  cluster_arrive();  // release: the partials, and this block's reads of the q/k conv state
  cluster_wait();
  if (finisher) {
    float total = 0.0f;
    for (int s = 0; s < n_slab; ++s) total += ss_slab[s];
    const float inv = rsqrtf(total / float(dv) + a.eps);
    const int64_t at = row * hvdv + int64_t(h) * dv + col;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float y = o4[e] * inv * gw[e];  // the gated norm has no weight offset
      y *= silu_f(gz[e]);
      st(a.normed.p, a.normed.dtype, at + e, y);
    }
  }
  // Every block of the cluster has read the q/k channels' conv state: rank 0 writes it.
  if (rank == 0) {
#pragma unroll
    for (int m = 0; m < kChan; ++m) {
      const int j = tid + m * kThreads;
      if (j < 2 * dk) conv_new_state(conv_state, chan[m], C, K, tap[m], xin[m]);
    }
  }
#else
  __trap();  // launched on sm_90+ only (gated_delta_mixer_fits)
#endif
}

using Kernel = void (*)(GdnMixerArgs, int, int, int, int64_t);
constexpr Kernel kKernels[] = {gdn_mixer_kernel<1>, gdn_mixer_kernel<2>, gdn_mixer_kernel<4>,
                               gdn_mixer_kernel<8>};

int instance_for(int dk) {
  for (int i = 0; i < 4; ++i)
    if (dk <= 32 * kRpts[i]) return i;
  return -1;
}

}  // namespace

void gated_delta_mixer_init() {
  for (int i = 0; i < 4; ++i) {
    HEARTH_CUDA_CHECK(
        cudaFuncSetAttribute(kKernels[i], cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    // The largest cluster the device can place for this block shape (16 on the H100/H200).
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kMaxCluster, 1);
    cfg.blockDim = dim3(kThreads);
    int size = 0;
    HEARTH_CUDA_CHECK(cudaOccupancyMaxPotentialClusterSize(&size, kKernels[i], &cfg));
    g_max_cluster[i] = size < kMaxCluster ? size : kMaxCluster;
  }
}

bool gated_delta_mixer_fits(const GdnMixerArgs& a) {
  const int64_t hk = a.hk, hv = a.hv, dk = a.dk, dv = a.dv;
  if (hk < 1 || hv < hk || hv % hk != 0 || dk < 1 || dv < 4 || dv % 4 != 0 ||
      dv > kMaxSlabs * kCols)
    return false;
  const int inst = instance_for(int(dk));
  if (inst < 0) return false;
  const int64_t C = 2 * hk * dk + hv * dv, K = a.conv_w.rows();
  const int64_t cluster = (hv / hk) * ((dv + kCols - 1) / kCols);
  const int64_t rows = a.n_rows > 0 ? a.n_rows : 1;
  return cluster <= g_max_cluster[inst] && a.qkv.rows() == rows && a.qkv.cols() == C &&
         a.conv_w.cols() == C && K >= 2 && K <= kMaxTaps && a.conv_state.numel() == (K - 1) * C &&
         a.state.dtype == kF32 && a.state.numel() == hv * dk * dv &&
         (a.n_rows > 0 || aligned16(a.state.p)) && a.a.numel() == rows * hv &&
         a.b.numel() == rows * hv && a.a_log.numel() == hv && a.dt_bias.numel() == hv &&
         a.norm_w.numel() == dv && a.z.numel() == rows * hv * dv &&
         a.normed.numel() == rows * hv * dv && rows <= 65535;
}

void gated_delta_mixer(Ctx& ctx, const GdnMixerArgs& a) {
  const int ratio = a.hv / a.hk, n_slab = (a.dv + kCols - 1) / kCols;
  const unsigned cluster = unsigned(ratio * n_slab);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(cluster, unsigned(a.hk), unsigned(a.n_rows > 0 ? a.n_rows : 1));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = ctx.stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = ctx.pdl ? 2 : 1;
  HEARTH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kKernels[instance_for(a.dk)], a, ratio, n_slab,
                                       int(a.conv_w.rows()), a.qkv.cols()));
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
