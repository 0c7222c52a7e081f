// The one-token decode step with its weights loaded ahead (StepArgs::loader_slots > 0; sm_90;
// docs/cuda.md, "One kernel per decode step with a loader warp").
//
// The same five phases per layer as decode_step.cu, the same grid barriers, the same attention
// (decode_step_attention.cuh) and the same rounding points, but the products take their weights
// from a shared-memory ring instead of each warp's own loads. Warp 0 of each block is the
// loader: one thread copies the block's rows of every product (q/k/v, o, gate/up, down, layer
// after layer) into the ring with bulk copies, as far ahead as the ring allows, and never waits
// at a grid barrier; the other 15 warps (the consumers) alone walk the phases. So the weights
// keep streaming while the consumers wait at a barrier, run attention or read a phase's input,
// which the plain kernel can only overlap with one staged batch. bench_cuda_stream's loader
// rows measured the structure first (docs/PERFORMANCE.md, session 11).
//
// Rows: block b owns the contiguous units [N·b/G, N·(b+1)/G) of a product of N units (a unit
// is a row, or for gate/up a gate row with its up row). A slot holds as many whole units of one
// matrix as fit (q, k and v are separate matrices), copied contiguously (gate/up: the gate rows,
// then the up rows). All 15 consumer warps work on each slot together: thread t takes the
// words t, t + 480, ... of every row, the warps' sums meet in shared memory, and the first
// threads add them in warp order (deterministic) and store the outputs.
#include <algorithm>

#include "backend/cuda/decode_step.h"
#include "backend/cuda/decode_step_attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mbarrier.cuh"

namespace hearth::cuda {

namespace {

using namespace step;

constexpr int kConsumerWarps = 15;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreadsL = kConsumers + 32;
constexpr uint32_t kSlotBytes = 32 * 1024;  // a unit (row, or gate + up row) must fit
constexpr int kMaxSlotRows = 16;            // rows of one slot (the warps' sums in shared memory)
constexpr int kMaxSlots = 8;

enum Product { kQkv, kO, kGlu, kDown, kProducts };

// A product's geometry, the same in every layer.
struct Geometry {
  int units[kProducts];     // rows, or gate/up row pairs
  int in8[kProducts];       // 16-byte words per row
  int per_slot[kProducts];  // units per slot
  int nq, nk;               // q rows, k rows (= v rows): where q/k/v's matrices change
};

__host__ __device__ inline int unit_rows(int p) { return p == kGlu ? 2 : 1; }

__host__ __device__ inline Geometry geometry(const StepArgs& a) {
  Geometry g;
  g.nq = a.nh * a.hd;
  g.nk = a.nkv * a.hd;
  const int units[kProducts] = {g.nq + 2 * g.nk, a.H, a.I, a.H};
  const int in8[kProducts] = {a.H / 8, g.nq / 8, a.H / 8, a.I / 8};
  for (int p = 0; p < kProducts; ++p) {
    g.units[p] = units[p];
    g.in8[p] = in8[p];
    const int by_bytes = int(kSlotBytes / (uint32_t(unit_rows(p)) * uint32_t(in8[p]) * 16u));
    g.per_slot[p] = by_bytes < kMaxSlotRows / unit_rows(p) ? by_bytes : kMaxSlotRows / unit_rows(p);
  }
  return g;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// The slots of block b's share of product p: [u0, u1) from `lo`, each within one matrix.
struct Slots {
  int lo, hi, per_slot, split1, split2;  // split1/2: q/k and k/v boundaries (q/k/v only)
  __device__ Slots(const Geometry& g, int p, int b, int G)
      : lo(int(int64_t(g.units[p]) * b / G)),
        hi(int(int64_t(g.units[p]) * (b + 1) / G)),
        per_slot(g.per_slot[p]),
        split1(p == kQkv ? g.nq : g.units[p]),
        split2(p == kQkv ? g.nq + g.nk : g.units[p]) {}
  __device__ int end_of(int u0) const {
    const int bound = u0 < split1 ? split1 : u0 < split2 ? split2 : hi;
    return min(min(u0 + per_slot, hi), bound);
  }
};

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

// Where the rows [u0, u1) of product p start in layer L (gate/up: the gate rows).
__device__ __forceinline__ const uint4* rows_at(const StepLayerDev& L, const Geometry& g, int p,
                                                int u0) {
  switch (p) {
    case kQkv: {
      const int64_t in8 = g.in8[kQkv];
      return u0 < g.nq          ? L.q + u0 * in8
             : u0 < g.nq + g.nk ? L.k + (u0 - g.nq) * in8
                                : L.v + (u0 - g.nq - g.nk) * in8;
    }
    case kO:
      return L.o + int64_t(u0) * g.in8[kO];
    case kGlu:
      return L.gate + int64_t(u0) * g.in8[kGlu];
    default:
      return L.down + int64_t(u0) * g.in8[kDown];
  }
}

// The loader (one thread): every slot of every product of every layer, in the consumers' order.
__device__ void load_all(const StepArgs& a, const Geometry& g, unsigned char* ring, uint64_t* full,
                         uint64_t* empty) {
  const int S = a.loader_slots;
  uint32_t n = 0;  // slots filled so far
  for (int il = 0; il < a.n_layers; ++il) {
    const StepLayerDev L = a.layers[il];
    for (int p = 0; p < kProducts; ++p) {
      const Slots sl(g, p, blockIdx.x, gridDim.x);
      for (int u0 = sl.lo; u0 < sl.hi; ++n) {
        const int u1 = sl.end_of(u0);
        const int s = int(n % uint32_t(S));
        const uint32_t use = n / uint32_t(S);
        if (use > 0) {
          mbar_wait(&empty[s], (use - 1) & 1);
          fence_proxy_async();
        }
        const uint32_t bytes = uint32_t(u1 - u0) * uint32_t(g.in8[p]) * 16u;
        unsigned char* dst = ring + size_t(s) * kSlotBytes;
        mbar_expect(&full[s], bytes * uint32_t(unit_rows(p)));
        bulk_copy(dst, rows_at(L, g, p, u0), bytes, &full[s]);
        if (p == kGlu) bulk_copy(dst + bytes, L.up + int64_t(u0) * g.in8[kGlu], bytes, &full[s]);
        u0 = u1;
      }
    }
  }
}

// The consumers' side of product p for this block: each slot's rows · xs, then
// store(unit, sum) (gate/up: store(unit, gate sum, up sum)). n counts the block's slots.
template <typename Store>
__device__ void consume_product(const Geometry& g, int p, int S, const unsigned char* ring,
                                uint64_t* full, uint64_t* empty, const uint4* xs, float* part,
                                uint32_t& n, int ct, Store store) {
  const int W = g.in8[p], warp = ct >> 5, lane = ct & 31;
  const Slots sl(g, p, blockIdx.x, gridDim.x);
  for (int u0 = sl.lo; u0 < sl.hi; ++n) {
    const int u1 = sl.end_of(u0), units = u1 - u0, rows = units * unit_rows(p);
    const int s = int(n % uint32_t(S));
    mbar_wait(&full[s], (n / uint32_t(S)) & 1);
    const uint4* q = reinterpret_cast<const uint4*>(ring + size_t(s) * kSlotBytes);
    float* sums = part + (n & 1) * kMaxSlotRows * kConsumerWarps;  // two: see below
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int c = ct; c < W; c += kConsumers) acc += dot8(q[r * W + c], xs[c]);
      acc = warp_sum(acc);
      if (lane == 0) sums[r * kConsumerWarps + warp] = acc;
    }
    consumer_sync();  // every warp's sums written, and the slot read by all
    if (ct == 0) mbar_arrive(&empty[s]);
    // The next slot writes the other sums buffer; the one after this one's again only past the
    // next slot's consumer_sync, by which these threads are done reading.
    if (ct < units) {
      float s1 = 0.0f, s2 = 0.0f;
      for (int w = 0; w < kConsumerWarps; ++w) s1 += sums[ct * kConsumerWarps + w];
      if (p == kGlu)
        for (int w = 0; w < kConsumerWarps; ++w) s2 += sums[(units + ct) * kConsumerWarps + w];
      store(u0 + ct, s1, s2);
    }
    u0 = u1;
  }
}

template <int E>
__global__ void __launch_bounds__(kThreadsL, 1) decode_step_loader_kernel(const StepArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ float part[2 * kMaxSlotRows * kConsumerWarps];
  __shared__ float red[kConsumerWarps];
  const int S = a.loader_slots;
  unsigned char* const ring = smem;
  uint4* const xs = reinterpret_cast<uint4*>(smem + size_t(S) * kSlotBytes);
  float* const qs_all = reinterpret_cast<float*>(xs + a.vec8);  // [kConsumerWarps][hd]
  const Geometry g = geometry(a);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
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
  uint32_t n = 0;
  auto add_to_x = [&](int r, float s, float) {
    a.x[r] = __float2bfloat16(bf(__ldcg(a.x + r)) + bf_round(s));
  };
  for (int il = 0; il < a.n_layers; ++il) {
    const StepLayerDev L = a.layers[il];
    // 1. q | k | v = rms_norm(x) · w
    consumer_normalise(a, L.attn_norm, xs, red, ct);
    consume_product(g, kQkv, S, ring, full, empty, xs, part, n, ct,
                    [&](int r, float s, float) { a.q[r] = __float2bfloat16(s); });
    consumer_grid_sync(a, ct);
    // 2. q/k norm, rope, cache store and attention, a warp per (query head, chunk of keys)
    for (int u = unit0; u < a.nh * nc; u += units_step) {
      const int hq = u % a.nh, c = u / a.nh, lo = first + c * per;
      chunk_attention<E>(a, L, hq, c, nc, lo, min(pos, lo + per - 1), pos, qs, nullptr, lane);
    }
    consumer_grid_sync(a, ct);
    // 3. x += o · attn
    consumer_stage(a.attn, nq, xs, ct);
    consume_product(g, kO, S, ring, full, empty, xs, part, n, ct, add_to_x);
    consumer_grid_sync(a, ct);
    // 4. h = act(gate · rms_norm(x)) ⊙ (up · rms_norm(x))
    consumer_normalise(a, L.ffn_norm, xs, red, ct);
    consume_product(g, kGlu, S, ring, full, empty, xs, part, n, ct, [&](int r, float sg, float su) {
      a.h[r] = __float2bfloat16(activation_f(a.act, sg) * su);
    });
    consumer_grid_sync(a, ct);
    // 5. x += down · h
    consumer_stage(a.h, a.I, xs, ct);
    consume_product(g, kDown, S, ring, full, empty, xs, part, n, ct, add_to_x);
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
  if (major < 9 || a.hd != 64 && a.hd != 128) return 0;
  const Geometry g = geometry(a);
  for (int p = 0; p < kProducts; ++p)
    if (g.per_slot[p] < 1) return 0;  // a unit larger than a slot
  // The kernel's static shared memory (mbarriers, the warps' sums) comes off the opt-in limit.
  constexpr size_t kStatic = 2 * kMaxSlots * 8 + (2 * kMaxSlotRows + 1) * kConsumerWarps * 4;
  const size_t fixed = fixed_smem_bytes(a) + kStatic;
  if (fixed >= size_t(optin)) return 0;
  const int slots = int(std::min<size_t>(kMaxSlots, (size_t(optin) - fixed) / kSlotBytes));
  if (slots < 3) return 0;  // too little lookahead to be worth it
  const size_t dyn = size_t(slots) * kSlotBytes + fixed_smem_bytes(a);
  const void* k = a.hd == 64 ? reinterpret_cast<const void*>(decode_step_loader_kernel<2>)
                             : reinterpret_cast<const void*>(decode_step_loader_kernel<4>);
  int blocks = 0;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dyn)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreadsL, dyn) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return blocks >= 1 ? slots : 0;
}

void decode_step_loader(Ctx& ctx, const StepArgs& a) {
  const size_t smem = size_t(a.loader_slots) * kSlotBytes + fixed_smem_bytes(a);
  if (a.hd == 64)
    decode_step_loader_kernel<2><<<ctx.sm_count, kThreadsL, smem, ctx.stream>>>(a);
  else
    decode_step_loader_kernel<4><<<ctx.sm_count, kThreadsL, smem, ctx.stream>>>(a);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
