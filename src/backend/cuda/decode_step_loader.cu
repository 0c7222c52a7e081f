// The one-token decode step with its weights loaded ahead (StepArgs::loader_slots > 0; sm_90;
// docs/cuda.md, "One kernel per decode step with a loader warp").
//
// The same five phases per layer as decode_step.cu, the same grid barriers, the same attention
// (decode_step_attention.cuh) and the same rounding points, but the products take their weights
// from shared memory instead of each warp's own loads. Warp 0 of each block is the loader: one
// thread copies the block's rows of every product (q/k/v, o, gate/up, down, layer after layer)
// with bulk copies, as far ahead as the buffers allow, and never waits at a grid barrier; the
// other 12 warps (the consumers) alone walk the phases. So the weights keep streaming while the
// consumers wait at a barrier, run attention or read a phase's input, which the plain kernel
// can only overlap with one staged batch. bench_cuda_stream's loader rows measured the
// structure first (docs/PERFORMANCE.md, session 11).
//
// Rows: block b owns the contiguous rows [R·b/G, R·(b+1)/G) of a product of R rows (gate/up:
// the same gate and up rows). They go in units: as many consecutive rows of one matrix as fit
// 8 KB (at most kMaxUnitRows), or one row when a row is longer. Unit i of the block goes to
// consumer warp i mod 12, which computes it alone from its own two 8 KB slots: a unit is copied
// in pieces of at most 8 KB (gate/up: the gate rows' pieces, then the up rows'), and a row
// longer than a piece is summed over its pieces in the warp's registers. No block-wide barrier
// per unit, and a phase ends at most one piece's arithmetic after its last copy lands (session
// 11: a first version in which all warps shared each 32 KB slot and met at a barrier per slot
// ran the 8B at 166 t/s against the plain kernel's 221).
#include <algorithm>

#include "backend/cuda/decode_step.h"
#include "backend/cuda/decode_step_attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mbarrier.cuh"

namespace hearth::cuda {

namespace {

using namespace step;

constexpr int kConsumerWarps = 12;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreadsL = kConsumers + 32;
constexpr int kPieceWords = 512;  // 8 KB: a slot
constexpr uint32_t kPieceBytes = kPieceWords * 16;
constexpr int kSlotsPerWarp = 2;
constexpr int kSlots = kConsumerWarps * kSlotsPerWarp;
constexpr size_t kRingBytes = size_t(kSlots) * kPieceBytes;

enum Product { kQkv, kO, kGlu, kDown, kProducts };

// A product's geometry, the same in every layer.
struct Geometry {
  int rows[kProducts];       // rows (gate/up: rows of each)
  int in8[kProducts];        // 16-byte words per row
  int unit_rows[kProducts];  // rows per unit
  int nq, nk;                // q rows, k rows (= v rows): where q/k/v's matrices change
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

constexpr int kMaxUnitRows = 16;  // short rows per unit (a lane each)
static_assert(kMaxUnitRows <= 32, "a lane owns each row of a unit");

__device__ Geometry geometry(const StepArgs& a) {
  Geometry g;
  g.nq = a.nh * a.hd;
  g.nk = a.nkv * a.hd;
  const int rows[kProducts] = {g.nq + 2 * g.nk, a.H, a.I, a.H};
  const int in8[kProducts] = {a.H / 8, g.nq / 8, a.H / 8, a.I / 8};
  for (int p = 0; p < kProducts; ++p) {
    g.rows[p] = rows[p];
    g.in8[p] = in8[p];
    const int fit = kPieceWords / in8[p];
    g.unit_rows[p] = fit < 1 ? 1 : fit > kMaxUnitRows ? kMaxUnitRows : fit;
  }
  return g;
}

// The units of block b's share of product p: [u0, u1) from `lo`, each within one matrix.
struct Units {
  int lo, hi, per_unit, split1, split2;  // split1/2: q/k and k/v boundaries (q/k/v only)
  __device__ Units(const Geometry& g, int p, int b, int G)
      : lo(int(int64_t(g.rows[p]) * b / G)),
        hi(int(int64_t(g.rows[p]) * (b + 1) / G)),
        per_unit(g.unit_rows[p]),
        split1(p == kQkv ? g.nq : g.rows[p]),
        split2(p == kQkv ? g.nq + g.nk : g.rows[p]) {}
  __device__ int end_of(int u0) const {
    const int bound = u0 < split1 ? split1 : u0 < split2 ? split2 : hi;
    return min(min(u0 + per_unit, hi), bound);
  }
};

// A unit's pieces: per matrix part (gate/up: 2), one piece of whole short rows, or a long row's
// ceil(in8 / kPieceWords) pieces.
__device__ __forceinline__ int pieces_per_part(int in8) {
  return (in8 + kPieceWords - 1) / kPieceWords;
}

// The consumer warps' own block barrier (named barrier 1; the loader warp never joins it).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"r"(kConsumers) : "memory");
}

// Sum over the consumer threads; every one of them gets the result. `red` [kConsumerWarps].
__device__ float consumer_sum(float v, float* red, int ct) {
  v = warp_sum(v);
  consumer_sync();  // red[] may still be read by a previous call
  if ((ct & 31) == 0) red[ct >> 5] = v;
  consumer_sync();
  const int lane = ct & 31;
  return warp_sum(lane < kConsumerWarps ? red[lane] : 0.0f);
}

// The grid barrier among the consumers of every block, as decode_step.cu's (a release add on a
// count that is never reset, acquire polling).
__device__ void consumer_grid_sync(const StepArgs& a, int ct) {
  consumer_sync();
  if (ct == 0) {
    unsigned long long before;
    asm volatile("atom.add.release.gpu.u64 %0, [%1], 1;"
                 : "=l"(before)
                 : "l"(a.barrier)
                 : "memory");
    const unsigned long long target = before - before % gridDim.x + gridDim.x;
    for (;;) {
      unsigned long long n;
      asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(n) : "l"(a.barrier) : "memory");
      if (n >= target) break;
      if (!a.spin) __nanosleep(32);
    }
  }
  consumer_sync();
}

// xs = bf16(x · inv_rms(x) · (gain + offset)), as normalise_input (gemv.cu) computes it.
__device__ void consumer_normalise(const StepArgs& a, const void* gain, uint4* xs, float* red,
                                   int ct) {
  const int in8 = a.H / 8;
  const uint4* x8 = reinterpret_cast<const uint4*>(a.x);
  float ss = 0.0f;
  for (int i = ct; i < in8; i += kConsumers) {
    const uint4 v = __ldcg(x8 + i);
    xs[i] = v;
    ss = add_squares_bf16x8(v, ss);
  }
  const float inv = rsqrtf(consumer_sum(ss, red, ct) / float(a.H) + a.eps);
  for (int i = ct; i < in8; i += kConsumers)
    xs[i] = scale_bf16x8(xs[i], inv, gain, a.gain_dt, i * 8, a.offset);
  consumer_sync();
}

// A bf16 vector produced in the step (by any block) into shared memory.
__device__ void consumer_stage(const __nv_bfloat16* v, int n, uint4* xs, int ct) {
  const uint4* v8 = reinterpret_cast<const uint4*>(v);
  for (int i = ct; i < n / 8; i += kConsumers) xs[i] = __ldcg(v8 + i);
  consumer_sync();
}

// Row r of product p in layer L; `up` for gate/up's second matrix.
__device__ __forceinline__ const uint4* row_at(const StepLayerDev& L, const Geometry& g, int p,
                                               int r, bool up) {
  const int64_t in8 = g.in8[p];
  switch (p) {
    case kQkv:
      return r < g.nq          ? L.q + r * in8
             : r < g.nq + g.nk ? L.k + (r - g.nq) * in8
                               : L.v + (r - g.nq - g.nk) * in8;
    case kO:
      return L.o + r * in8;
    case kGlu:
      return (up ? L.up : L.gate) + r * in8;
    default:
      return L.down + r * in8;
  }
}

// Piece j of a part of unit [u0, u1): its first word in the matrix from row u0, its words.
__device__ __forceinline__ void piece_span(int in8, int rows, int j, int64_t& first,
                                           uint32_t& words) {
  if (in8 <= kPieceWords) {
    first = 0;
    words = uint32_t(rows * in8);
  } else {
    first = int64_t(j) * kPieceWords;
    words = uint32_t(min(kPieceWords, in8 - j * kPieceWords));
  }
}

// The loader (one thread): every piece of every unit of every product of every layer, each into
// the next slot of its unit's warp. The per-warp order is the consumers'; across warps the
// pieces go in waves: the first pieces of the next 12 units (one per warp), then their second
// pieces, and so on, so that a unit of more pieces than its warp has slots (an 8B down row: 3)
// waits only for pieces requested a whole wave earlier, not for its own first piece to land.
__device__ void load_all(const StepArgs& a, const Geometry& g, unsigned char* ring, uint64_t* full,
                         uint64_t* empty) {
  uint32_t filled[kConsumerWarps] = {};  // pieces given to each warp so far
  uint32_t seq = 0;                      // units so far
  int start[kConsumerWarps], end[kConsumerWarps];
  for (int il = 0; il < a.n_layers; ++il) {
    const StepLayerDev L = a.layers[il];
    for (int p = 0; p < kProducts; ++p) {
      const Units un(g, p, blockIdx.x, gridDim.x);
      const int in8 = g.in8[p], per = pieces_per_part(in8), parts = p == kGlu ? 2 : 1;
      for (int u0 = un.lo; u0 < un.hi;) {
        int k = 0;  // the wave's units
        for (; u0 < un.hi && k < kConsumerWarps; ++k) {
          start[k] = u0;
          end[k] = u0 = un.end_of(u0);
        }
        for (int pj = 0; pj < parts * per; ++pj) {
          const int m = pj / per, j = pj - m * per;
          for (int i = 0; i < k; ++i) {
            const int w = int((seq + uint32_t(i)) % kConsumerWarps);
            const uint32_t n = filled[w]++;
            const int s = w * kSlotsPerWarp + int(n % kSlotsPerWarp);
            if (n >= kSlotsPerWarp) {
              mbar_wait(&empty[s], (n / kSlotsPerWarp - 1) & 1);
              fence_proxy_async();
            }
            int64_t first;
            uint32_t words;
            piece_span(in8, end[i] - start[i], j, first, words);
            mbar_expect(&full[s], words * 16u);
            bulk_copy(ring + size_t(s) * kPieceBytes, row_at(L, g, p, start[i], m == 1) + first,
                      words * 16u, &full[s]);
          }
        }
        seq += uint32_t(k);
      }
    }
  }
}

// Consumer warp w's side of product p: its units' rows · xs from its slots. Lane i of the warp
// owns row i of a unit (at most kMaxUnitRows < 32): it reads pre = prefetch(row) when the unit
// starts, before the unit's weights are waited for (the residual, for the adds: no round trip
// after the sums), keeps a gate row's sum, and calls emit(row, pre, gate sum, sum) once the
// row's sum is known (gate/up: for the up row). `used` counts the warp's pieces, `seq` the
// block's units.
template <typename Prefetch, typename Emit>
__device__ void consume_product(const Geometry& g, int p, const unsigned char* ring, uint64_t* full,
                                uint64_t* empty, const uint4* xs, uint32_t& used, uint32_t& seq,
                                int w, int lane, Prefetch prefetch, Emit emit) {
  const Units un(g, p, blockIdx.x, gridDim.x);
  const int in8 = g.in8[p], per = pieces_per_part(in8), parts = p == kGlu ? 2 : 1;
  for (int u0 = un.lo; u0 < un.hi; ++seq) {
    const int u1 = un.end_of(u0);
    if (int(seq % kConsumerWarps) == w) {
      const float pre = lane < u1 - u0 ? prefetch(u0 + lane) : 0.0f;
      float gate = 0.0f;
      for (int m = 0; m < parts; ++m) {
        float acc = 0.0f;  // a long row's sum over its pieces
        for (int j = 0; j < per; ++j) {
          const uint32_t k = used++;
          const int s = w * kSlotsPerWarp + int(k % kSlotsPerWarp);
          mbar_wait(&full[s], (k / kSlotsPerWarp) & 1);
          const uint4* q = reinterpret_cast<const uint4*>(ring + size_t(s) * kPieceBytes);
          int64_t first;
          uint32_t words;
          piece_span(in8, u1 - u0, j, first, words);
          const int row_words = in8 <= kPieceWords ? in8 : int(words);
          const uint4* x = xs + first;
          for (int r = 0; r * row_words < int(words); ++r) {
            const uint4* qr = q + r * row_words;
            float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int c = lane;
            for (; c + 96 < row_words; c += 128) {
              uint4 wv[4], xv[4];
#pragma unroll
              for (int t = 0; t < 4; ++t) {
                wv[t] = qr[c + 32 * t];
                xv[t] = x[c + 32 * t];
              }
#pragma unroll
              for (int t = 0; t < 4; ++t) s4[t] += dot8(wv[t], xv[t]);
            }
            for (; c < row_words; c += 32) s4[0] += dot8(qr[c], x[c]);
            acc += (s4[0] + s4[1]) + (s4[2] + s4[3]);
            if (in8 <= kPieceWords || j == per - 1) {  // the row is complete
              const float sum = warp_sum(acc);
              acc = 0.0f;
              if (lane == r) {
                if (m + 1 < parts)
                  gate = sum;
                else
                  emit(u0 + r, pre, gate, sum);
              }
            }
          }
          __syncwarp();  // every lane done with the slot
          if (lane == 0) mbar_arrive(&empty[s]);
        }
      }
    }
    u0 = u1;
  }
}

template <int E>
__global__ void __launch_bounds__(kThreadsL, 1) decode_step_loader_kernel(const StepArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kSlots], empty[kSlots];
  __shared__ float red[kConsumerWarps];
  unsigned char* const ring = smem;
  uint4* const xs = reinterpret_cast<uint4*>(smem + kRingBytes);
  float* const qs_all = reinterpret_cast<float*>(xs + a.vec8);  // [kConsumerWarps][hd]
  const Geometry g = geometry(a);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(&full[s]);
      mbar_init(&empty[s]);
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last whole-block barrier: the loader warp leaves the rest to the others
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) load_all(a, g, ring, full, empty);
    return;
  }
  const int ct = int(threadIdx.x) - 32, warp = ct >> 5, lane = ct & 31;
  const int G = gridDim.x;
  const int unit0 = blockIdx.x + G * warp, units_step = G * kConsumerWarps;
  const int hd = E * 32, nq = a.nh * hd;
  const int pos = a.pos_first[0], first = a.pos_first[1];
  const int n_keys = pos - first + 1;
  const int nc = min((n_keys + 31) / 32, kStepMaxChunks), per = (n_keys + nc - 1) / nc;
  float* qs = qs_all + warp * hd;
  uint32_t used = 0, seq = 0;
  auto nothing = [](int) { return 0.0f; };
  auto residual = [&](int r) { return bf(__ldcg(a.x + r)); };
  auto add_to_x = [&](int r, float x, float, float s) {
    a.x[r] = __float2bfloat16(x + bf_round(s));
  };
  for (int il = 0; il < a.n_layers; ++il) {
    const StepLayerDev L = a.layers[il];
    // 1. q | k | v = rms_norm(x) · w
    consumer_normalise(a, L.attn_norm, xs, red, ct);
    consume_product(g, kQkv, ring, full, empty, xs, used, seq, warp, lane, nothing,
                    [&](int r, float, float, float s) { a.q[r] = __float2bfloat16(s); });
    consumer_grid_sync(a, ct);
    // 2. q/k norm, rope, cache store and attention, a warp per (query head, chunk of keys)
    for (int u = unit0; u < a.nh * nc; u += units_step) {
      const int hq = u % a.nh, c = u / a.nh, lo = first + c * per;
      chunk_attention<E>(a, L, hq, c, nc, lo, min(pos, lo + per - 1), pos, qs, nullptr, lane);
    }
    consumer_grid_sync(a, ct);
    // 3. x += o · attn
    consumer_stage(a.attn, nq, xs, ct);
    consume_product(g, kO, ring, full, empty, xs, used, seq, warp, lane, residual, add_to_x);
    consumer_grid_sync(a, ct);
    // 4. h = act(gate · rms_norm(x)) ⊙ (up · rms_norm(x))
    consumer_normalise(a, L.ffn_norm, xs, red, ct);
    consume_product(g, kGlu, ring, full, empty, xs, used, seq, warp, lane, nothing,
                    [&](int r, float, float sg, float su) {
                      a.h[r] = __float2bfloat16(activation_f(a.act, sg) * su);
                    });
    consumer_grid_sync(a, ct);
    // 5. x += down · h
    consumer_stage(a.h, a.I, xs, ct);
    consume_product(g, kDown, ring, full, empty, xs, used, seq, warp, lane, residual, add_to_x);
    consumer_grid_sync(a, ct);
  }
}

#else

template <int E>
__global__ void decode_step_loader_kernel(const StepArgs) {
  __trap();  // loader_ring_slots() offers it on sm_90 and later only
}

#endif

size_t fixed_smem_bytes(const StepArgs& a) {
  return size_t(a.vec8) * 16 + size_t(kConsumerWarps) * size_t(a.hd) * 4;
}

}  // namespace

int loader_ring_slots(const StepArgs& a) {
  int dev = 0, major = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (major < 9 || (a.hd != 64 && a.hd != 128)) return 0;
  // The kernel's static shared memory (mbarriers, a reduction's scratch) comes off the limit.
  constexpr size_t kStatic = 2 * kSlots * 8 + kConsumerWarps * 4;
  const size_t dyn = kRingBytes + fixed_smem_bytes(a);
  if (dyn + kStatic > size_t(optin)) return 0;
  const void* k = a.hd == 64 ? reinterpret_cast<const void*>(decode_step_loader_kernel<2>)
                             : reinterpret_cast<const void*>(decode_step_loader_kernel<4>);
  int blocks = 0;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dyn)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreadsL, dyn) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return blocks >= 1 ? kSlots : 0;
}

void decode_step_loader(Ctx& ctx, const StepArgs& a) {
  const size_t smem = kRingBytes + fixed_smem_bytes(a);
  if (a.hd == 64)
    decode_step_loader_kernel<2><<<ctx.sm_count, kThreadsL, smem, ctx.stream>>>(a);
  else
    decode_step_loader_kernel<4><<<ctx.sm_count, kThreadsL, smem, ctx.stream>>>(a);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
