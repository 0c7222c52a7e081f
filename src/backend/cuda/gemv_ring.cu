// Decode products through a per-warp ring of asynchronous copies (cp.async, sm_80+): the same
// work split, arithmetic and epilogue as gemv_kernel (gemv.cu), with the weights travelling
// global → shared memory instead of global → registers. Opt-in (HEARTH_GEMV_RING=1) until
// measured against the default.
//
// Why (PERFORMANCE.md, session 9): over the layer matrices of the 8B, gemv_kernel streams at
// 3.61 TB/s where a plain streaming kernel with the same kernel boundaries reaches 4.28. The
// register kernel keeps at most four 16-byte loads per lane in flight, and none while it
// multiplies, reduces a row or waits at the block's barrier; more loads per lane cost registers
// and so warps (session 2: eight lost to four). A copy into shared memory holds no register
// until it is read back, so each warp here keeps kStages − 1 stages of kWords words per lane
// (per matrix) requested at all times, across row ends and barriers, while it multiplies the
// stage that has landed.
//
// A lane reads back only the words it copied itself, so cp.async.wait_group alone orders them:
// no barrier is needed between the ring's producer and consumer (they are the same thread).
#include <cstdlib>
#include <map>
#include <string>

#include "backend/cuda/gemv_args.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = kGemvWarps;
constexpr int kWords = 2;  // 16-byte words per lane per matrix in one stage

__device__ __forceinline__ void copy16(uint4* dst, const uint4* src, bool valid) {
  const unsigned d = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy16_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void copy16_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Shared memory: NORM's normalised input [N][in8], then each warp's ring [kStages][M][kWords][32].
template <int N, bool GLU, bool NORM, int kStages>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_ring_kernel(const GemvArgs a, int64_t n_groups) {
  constexpr int M = GLU ? 2 : 1;
  constexpr int kStage = M * kWords * 32;  // a warp's words in one stage
  extern __shared__ uint4 smem[];
  __shared__ float part[kWarps][GLU ? 2 * N : N];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = kWarps / a.split;
  const int slot = warp / a.split, piece = warp % a.split;
  const int64_t len = (a.in8 + a.split - 1) / a.split;
  const int64_t c_lo = piece * len, c_hi = min(a.in8, c_lo + len);
  // Stages per row: the same for every warp of the block (from len, not this piece's length),
  // so all of them reach the block barriers after the same number of stages.
  const int64_t n_stages = max(int64_t(1), (len + 32 * kWords - 1) / (32 * kWords));
  uint4* xs = smem;
  uint4* ring = smem + (NORM ? N * a.in8 : 0) + warp * kStages * kStage;

  // The copy cursor runs kStages − 1 stages ahead of the multiplication: (group, stage, slot).
  int64_t cg = blockIdx.x, cs = 0;
  int cslot = 0;
  auto request = [&] {
    if (cg < n_groups) {
      const GemvSeg& g = a.seg[seg_of(a, cg)];
      const int64_t row = (cg - g.first_block) * rows_per_block + slot;
      const bool live = row < g.rows;
      uint4* dst = ring + cslot * kStage + lane;
#pragma unroll
      for (int u = 0; u < kWords; ++u) {
        const int64_t c = c_lo + lane + (cs * kWords + u) * 32;
        const bool ok = live && c < c_hi;
        copy16(dst + u * 32, ok ? g.w + row * a.in8 + c : g.w, ok);
        if constexpr (GLU) copy16(dst + (kWords + u) * 32, ok ? g.w2 + row * a.in8 + c : g.w2, ok);
      }
      if (++cs == n_stages) {
        cs = 0;
        cg += gridDim.x;
      }
    }
    copy16_commit();  // (empty past the end: one group per stage keeps wait_group's count)
    cslot = cslot + 1 == kStages ? 0 : cslot + 1;
  };

  pdl_trigger();
  // Weights are never written: the first stages fly while the previous kernel finishes.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) request();
  pdl_wait();
  if constexpr (NORM) {
    normalise_input(a, N, xs);
    __syncthreads();
  }
  int rslot = 0;  // the stage being multiplied
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const GemvSeg& g = a.seg[seg_of(a, group)];
    const int64_t row = (group - g.first_block) * rows_per_block + slot;
    const bool live = row < g.rows;
    float acc[N], acc2[N];
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] = acc2[r] = 0.0f;
    for (int64_t s = 0; s < n_stages; ++s) {
      request();
      copy16_wait<kStages - 1>();  // this lane's copies of stage s have landed
      const uint4* st = ring + rslot * kStage + lane;
#pragma unroll
      for (int u = 0; u < kWords; ++u) {
        const int64_t c = c_lo + lane + (s * kWords + u) * 32;
        if (live && c < c_hi) {
          const uint4 wv = st[u * 32];
          const uint4 uv = GLU ? st[(kWords + u) * 32] : wv;
#pragma unroll
          for (int r = 0; r < N; ++r) {
            const uint4 xv = NORM ? xs[r * a.in8 + c] : a.x[r * a.in8 + c];
            acc[r] += dot8(wv, xv);
            if constexpr (GLU) acc2[r] += dot8(uv, xv);
          }
        }
      }
      rslot = rslot + 1 == kStages ? 0 : rslot + 1;
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
      acc[r] = warp_sum(acc[r]);
      if constexpr (GLU) acc2[r] = warp_sum(acc2[r]);
    }
    if (a.split > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          part[warp][r] = acc[r];
          if constexpr (GLU) part[warp][N + r] = acc2[r];
        }
      }
      __syncthreads();
      if (piece == 0) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          for (int p = 1; p < a.split; ++p) {
            acc[r] += part[warp + p][r];
            if constexpr (GLU) acc2[r] += part[warp + p][N + r];
          }
        }
      }
      __syncthreads();  // part[] is rewritten by the next group
    }
    if (live && lane == 0 && piece == 0)
#pragma unroll
      for (int r = 0; r < N; ++r) store_row<GLU>(g, a.act, r, row, acc[r], acc2[r]);
  }
  copy16_wait<0>();  // (only empty groups are left)
}

// HEARTH_GEMV_RING_STAGES=8: eight stages instead of four (read once).
bool deep_ring() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_GEMV_RING_STAGES");
    return e && std::string(e) == "8";
  }();
  return on;
}

size_t ring_bytes(bool glu, bool deep) {
  return size_t(kWarps) * 32 * (deep ? 8 : 4) * (glu ? 2 : 1) * kWords * 16;
}

// Calls f with the kernel for n activation rows (1..8) and the given variant.
template <int N = 1, typename F>
void with_kernel(int64_t n, bool glu, bool norm, bool deep, F&& f) {
  if constexpr (N <= 8) {
    if (n != N) return with_kernel<N + 1>(n, glu, norm, deep, f);
    auto stages = [&](auto g, auto nm) {
      constexpr bool G = decltype(g)::value, NM = decltype(nm)::value;
      deep ? f(gemv_ring_kernel<N, G, NM, 8>) : f(gemv_ring_kernel<N, G, NM, 4>);
    };
    using T = std::true_type;
    using F0 = std::false_type;
    glu ? (norm ? stages(T(), T()) : stages(T(), F0()))
        : (norm ? stages(F0(), T()) : stages(F0(), F0()));
  }
}

// The dynamic shared memory each kernel was allowed (gemv_ring_init): the ring plus up to 96 KB
// of normalised input, less where the device allows less.
std::map<const void*, size_t> g_allowed;

}  // namespace

void gemv_ring_init() {
  for (int n = 1; n <= 8; ++n)
    for (bool glu : {false, true})
      for (bool norm : {false, true})
        for (bool deep : {false, true})
          with_kernel(n, glu, norm, deep, [&](auto kernel) {
            const void* k = reinterpret_cast<const void*>(kernel);
            g_allowed[k] =
                allow_dynamic_smem(k, (norm ? kGemvMaxNormBytes : 0) + ring_bytes(glu, deep));
          });
}

bool gemv_ring(Ctx& ctx, const GemvArgs& a, int64_t n, bool glu, int64_t n_groups) {
  if (!gemv_takes(GemvKernel::Ring) || n < 1 || n > 8 || n_groups < 1) return false;
  const bool norm = a.norm_w != nullptr, deep = deep_ring();
  const size_t smem = (norm ? size_t(n) * size_t(a.in8) * 16 : 0) + ring_bytes(glu, deep);
  bool launched = false;
  with_kernel(n, glu, norm, deep, [&](auto kernel) {
    const void* k = reinterpret_cast<const void*>(kernel);
    const auto it = g_allowed.find(k);
    if (it == g_allowed.end() || smem > it->second) return;
    const int64_t resident = int64_t(ctx.sm_count) * gemv_resident_blocks(k, smem);
    const unsigned grid = unsigned(std::min(n_groups, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), smem, a, n_groups);
    launched = true;
  });
  return launched;
}

}  // namespace hearth::cuda
