// Decode products with the work spread evenly over every warp on the GPU: the same products,
// arithmetic and epilogue as gemv_kernel (gemv.cu: plain, GLU, input norm, residual add,
// several matrices per launch, n ≤ 8 activation rows). Opt-in (HEARTH_GEMV_EVEN=1) until
// measured against the default.
//
// Why (PERFORMANCE.md, session 9): gemv_kernel hands out groups of rows to persistent blocks.
// On the 8B's o and down products (4096 rows) that is 1024 groups for 660 resident blocks, so
// half the blocks do two groups and half one, and the second half of each launch streams with
// half the GPU; every group also ends at two block barriers, with nothing in flight past them.
// Here the unit of work is a piece of a row (at most 128 16-byte words: one batch of four loads per
// lane), the units of all the launch's matrices are numbered row by row, and warp w of T takes
// units [w·U/T, (w+1)·U/T): every warp gets the same count within one, every SM the same bytes, and
// a warp walks one contiguous stretch of memory with the next unit's loads in flight while it
// multiplies the current one. No barrier follows the input norm.
//
// A row whose units fall to several warps (only at the ends of a warp's stretch) is combined
// deterministically: each of its warps stores its partial sums in its own slot (a warp has two:
// for its first row and its last), then counts itself in at the row's counter; the last to
// arrive adds the slots in warp order, stores the row and sets the counter back to zero, so the
// workspace is clean for the next launch. Counters and slots are read and written only after
// pdl_wait(), when the previous launch has finished with them.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/gemv_args.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = kGemvWarps;
constexpr int kSlot = 2 * 8;        // a slot's floats: n ≤ 8 sums, twice for the GLU
constexpr int kMaxWarpsPerSm = 64;  // sizes the workspace (sm_80/90: 64, sm_89: 48)

struct EvenArgs {
  int units;           // U: rows of all matrices × pieces
  int warps;           // T
  int pieces;          // P: units per row
  int piece_words;     // L = ceil(in8 / P) ≤ 32 · kUnroll
  float* slots;        // [T][2][kSlot]
  unsigned* counters;  // [T]: counter of the shared row that warp w starts inside
};

__device__ __forceinline__ int first_unit(const EvenArgs& e, int w) {
  return int(int64_t(w) * e.units / e.warps);
}
// The warp whose stretch holds unit u: the largest w with first_unit(w) ≤ u.
__device__ __forceinline__ int owner(const EvenArgs& e, int u) {
  return int((int64_t(u + 1) * e.warps - 1) / e.units);
}

// Unit u's weights (and the GLU's second matrix) for this lane: words c_lo + lane + 32j.
// kUnroll: 16-byte loads per lane per matrix in one unit (a unit is at most 32 · kUnroll words).
template <bool GLU, int kUnroll>
__device__ __forceinline__ void load_unit(const GemvArgs& a, const EvenArgs& e, int u, int lane,
                                          uint4 (&w)[kUnroll], uint4 (&w2)[kUnroll]) {
  const int grow = u / e.pieces, piece = u - grow * e.pieces;
  const GemvSeg& g = a.seg[seg_of(a, grow)];
  const int64_t base = (grow - g.first_block) * a.in8;
  const int64_t c_lo = int64_t(piece) * e.piece_words, c_hi = min(a.in8, c_lo + e.piece_words);
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const int64_t c = c_lo + lane + 32 * j;
    w[j] = c < c_hi ? ld_stream(g.w + base + c) : make_uint4(0, 0, 0, 0);
    if constexpr (GLU) w2[j] = c < c_hi ? ld_stream(g.w2 + base + c) : make_uint4(0, 0, 0, 0);
  }
}

// This warp's sums for global row `grow` (every lane holds them): stored if the warp holds the
// whole row, else combined through the slots as described above.
template <int N, bool GLU>
__device__ __forceinline__ void finish_row(const GemvArgs& a, const EvenArgs& e, int grow, int w,
                                           int u0, int u1, const float (&acc)[N],
                                           const float (&acc2)[N], int lane) {
  if (lane != 0) return;
  const GemvSeg& g = a.seg[seg_of(a, grow)];
  const int64_t row = grow - g.first_block;
  const int ru0 = grow * e.pieces, ru1 = ru0 + e.pieces;
  if (ru0 >= u0 && ru1 <= u1) {
#pragma unroll
    for (int r = 0; r < N; ++r) store_row<GLU>(g, a.act, r, row, acc[r], acc2[r]);
    return;
  }
  const int wf = owner(e, ru0), wl = owner(e, ru1 - 1);
  float* mine = e.slots + (int64_t(w) * 2 + (grow == u0 / e.pieces ? 0 : 1)) * kSlot;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    mine[r] = acc[r];
    if constexpr (GLU) mine[N + r] = acc2[r];
  }
  __threadfence();
  if (atomicAdd(&e.counters[wf + 1], 1u) != unsigned(wl - wf)) return;
  __threadfence();
  float sum[N], sum2[N];
#pragma unroll
  for (int r = 0; r < N; ++r) sum[r] = sum2[r] = 0.0f;
  for (int v = wf; v <= wl; ++v) {
    const float* s =
        e.slots + (int64_t(v) * 2 + (grow == first_unit(e, v) / e.pieces ? 0 : 1)) * kSlot;
#pragma unroll
    for (int r = 0; r < N; ++r) {
      sum[r] += __ldcg(s + r);
      if constexpr (GLU) sum2[r] += __ldcg(s + N + r);
    }
  }
#pragma unroll
  for (int r = 0; r < N; ++r) store_row<GLU>(g, a.act, r, row, sum[r], sum2[r]);
  e.counters[wf + 1] = 0;
}

template <int N, bool GLU, bool NORM, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_even_kernel(const GemvArgs a, const EvenArgs e) {
  extern __shared__ uint4 xs[];  // NORM: the normalised input [N][in8]
  const int lane = threadIdx.x & 31;
  const int w = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int u0 = w < e.warps ? first_unit(e, w) : 0;
  const int u1 = w < e.warps ? first_unit(e, w + 1) : 0;
  pdl_trigger();
  // Two buffers, so that one unit's loads are in flight while the other's are multiplied.
  uint4 wa[kUnroll], ua[kUnroll], wb[kUnroll], ub[kUnroll];
  // The first unit's weights fly while the previous kernel finishes (weights are never written).
  if (u0 < u1) load_unit<GLU, kUnroll>(a, e, u0, lane, wa, ua);
  pdl_wait();
  if constexpr (NORM) {
    normalise_input(a, N, xs);
    __syncthreads();
  }
  float acc[N], acc2[N];
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = acc2[r] = 0.0f;
  // Multiplies unit u (its weights in cur) after requesting unit u + 1 into nxt.
  auto step = [&](int u, const uint4(&cur)[kUnroll], const uint4(&cur2)[kUnroll],
                  uint4(&nxt)[kUnroll], uint4(&nxt2)[kUnroll]) {
    if (u + 1 < u1) load_unit<GLU, kUnroll>(a, e, u + 1, lane, nxt, nxt2);
    const int grow = u / e.pieces, piece = u - grow * e.pieces;
    const int64_t c_lo = int64_t(piece) * e.piece_words, c_hi = min(a.in8, c_lo + e.piece_words);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t c = c_lo + lane + 32 * j;
      if (c < c_hi) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          const uint4 xv = NORM ? xs[r * a.in8 + c] : a.x[r * a.in8 + c];
          acc[r] += dot8(cur[j], xv);
          if constexpr (GLU) acc2[r] += dot8(cur2[j], xv);
        }
      }
    }
    if (piece == e.pieces - 1 || u + 1 == u1) {  // this warp's part of the row is done
#pragma unroll
      for (int r = 0; r < N; ++r) {
        acc[r] = warp_sum(acc[r]);
        if constexpr (GLU) acc2[r] = warp_sum(acc2[r]);
      }
      finish_row<N, GLU>(a, e, grow, w, u0, u1, acc, acc2, lane);
#pragma unroll
      for (int r = 0; r < N; ++r) acc[r] = acc2[r] = 0.0f;
    }
  };
  for (int u = u0; u < u1; u += 2) {
    step(u, wa, ua, wb, ub);
    if (u + 1 < u1) step(u + 1, wb, ub, wa, ua);
  }
}

// HEARTH_GEMV_EVEN_UNROLL=2: units of 64 words (two loads per lane) instead of 128 (read once).
bool short_units() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_GEMV_EVEN_UNROLL");
    return e && std::string(e) == "2";
  }();
  return on;
}

// Calls f with the kernel for n activation rows (1..8) and the given variant.
template <int N = 1, typename F>
void with_kernel(int64_t n, bool glu, bool norm, F&& f) {
  if constexpr (N <= 8) {
    if (n != N) return with_kernel<N + 1>(n, glu, norm, f);
    auto by_unroll = [&](auto g, auto nm) {
      constexpr bool G = decltype(g)::value, NM = decltype(nm)::value;
      short_units() ? f(gemv_even_kernel<N, G, NM, 2>) : f(gemv_even_kernel<N, G, NM, 4>);
    };
    using T = std::true_type;
    using F0 = std::false_type;
    glu ? (norm ? by_unroll(T(), T()) : by_unroll(T(), F0()))
        : (norm ? by_unroll(F0(), T()) : by_unroll(F0(), F0()));
  }
}

// HEARTH_GEMV_EVEN_EXACT=1: as many warps as give every warp the same unit count (≤ resident),
// instead of every resident warp (read once).
bool exact_warps() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_GEMV_EVEN_EXACT");
    return e && std::string(e) == "1";
  }();
  return on;
}

size_t g_norm_bytes = 0;  // the normalised input's largest size (gemv_even_init)

}  // namespace

size_t gemv_workspace_bytes(int sm_count) {
  const size_t warps = size_t(sm_count) * kMaxWarpsPerSm;
  return warps * 2 * kSlot * sizeof(float) + (warps + 1) * sizeof(unsigned);
}

void gemv_even_init() {
  size_t least = kGemvMaxNormBytes;
  for (int n = 1; n <= 8; ++n)
    for (bool glu : {false, true})
      with_kernel(n, glu, true, [&](auto kernel) {
        least = std::min(
            least, allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kGemvMaxNormBytes));
      });
  g_norm_bytes = least;
}

bool gemv_even(Ctx& ctx, GemvArgs a, int64_t n, bool glu, int64_t total_rows) {
  if (!gemv_takes(GemvKernel::Even) || !ctx.gemv_ws || n < 1 || n > 8 || total_rows < 1)
    return false;
  const bool norm = a.norm_w != nullptr;
  const size_t smem = norm ? size_t(n) * size_t(a.in8) * 16 : 0;
  if (smem > (norm ? g_norm_bytes : 0)) return false;
  EvenArgs e{};
  const int64_t piece = short_units() ? 64 : 128;  // 32 · the kernel's kUnroll
  e.pieces = int((a.in8 + piece - 1) / piece);
  e.piece_words = int((a.in8 + e.pieces - 1) / e.pieces);
  if (total_rows * e.pieces >= (int64_t(1) << 31)) return false;
  e.units = int(total_rows * e.pieces);
  int64_t rows = 0;  // a segment's first global row
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = rows;
    rows += a.seg[i].rows;
  }
  const size_t warps_room = size_t(ctx.sm_count) * kMaxWarpsPerSm;
  e.slots = static_cast<float*>(ctx.gemv_ws);
  e.counters = reinterpret_cast<unsigned*>(e.slots + warps_room * 2 * kSlot);
  with_kernel(n, glu, norm, [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    int64_t warps = std::min(std::min(int64_t(e.units), resident * kWarps), int64_t(warps_room));
    if (exact_warps()) {
      const int64_t per_warp = (e.units + warps - 1) / warps;
      warps = (e.units + per_warp - 1) / per_warp;
    }
    e.warps = int(warps);
    const unsigned grid = unsigned((warps + kWarps - 1) / kWarps);
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), smem, a, e);
  });
  return true;
}

}  // namespace hearth::cuda
