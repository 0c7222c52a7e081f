// A one-token decode step of a plain llama-family stack, or of a Qwen3.5 hybrid stack, as one
// persistent kernel (Backend::decode_layers; docs/cuda.md, "One kernel per decode step").
//
// Inside the graph every decode launch costs a fixed 6–10 µs inside the graph whatever its
// size, six per layer; this kernel has one launch per step. One block per SM, 16 warps, stays
// resident for the whole step and walks each layer's five phases, separated by grid barriers:
//   1. every block normalises x into shared memory; q/k/v rows (and a gated layer's output
//      gate rows) spread over all warps;
//   2. attention, a block per query head and a warp per chunk of its keys: it applies q/k
//      RMSNorm and rope itself, stores the new k and v into the cache, and the block combines
//      the chunks' partials in shared memory (decode_step_attention.cuh);
//   3. o rows, each added into the residual stream by its owner;
//   4. every block normalises x again; gate/up rows with the activation;
//   5. down rows added into the residual stream.
// A Gated DeltaNet layer of a hybrid stack has the same five phases: its in_proj rows (f32
// products) in phase 1, the mixer in phase 2 (a block per value head, decode_step_mixer.cuh),
// its out projection in phase 3; after that projection, the blocks that ran the mixer update
// the conv states and write the recurrent state back.
// Work units go round-robin over blocks first (unit u: block u % G, warp u / G), so a phase
// with fewer units than warps still spreads over the SMs. The arithmetic and rounding points
// are those of the per-op kernels (gemv.cu, rope.cu, attention.cu, gated_delta_mixer.cu):
// bf16 stores where they store, f32 in between. Data written in the step by other blocks is
// read through L2 (__ldcg: L1 is not coherent); weights through the non-caching path.
//
// Between its arrival at a grid barrier and its wait there, a warp requests what its next
// phase reads that depends on nothing computed before the barrier, so the wait overlaps that
// traffic: the first batch of its first weight rows (StepArgs::stage, stage_first; not in the
// barrier thread's warp; in a llama stack the o rows' second batch too, StepArgs::stage2, once
// the block's attention is done: the 0.6B's o rows are then all in shared memory before phase 3;
// 0.6B +0.8–1.0 %, 8B even) and, for attention, its chunk's cached keys and values
// (StepArgs::kv_prefetch, prefetch_kv) and the q/k gains and rotation (load_head_consts); for the
// mixer, its head's recurrent state and conv constants; before a norm, the norm's gains
// (norm_gains_to_l1).
//
// The kernel is large (146–212 KB of sm_90 code per instance), larger than an SM's instruction
// cache, so code that runs once per layer (attention, the mixer) starts cold: clock marks
// found a head of 256's attention 3–4 times slower on its first chunk than on its second.
// Such code is kept short where that measured faster (kScoreUnroll, the combine's loop over the
// chunks). What is left of it is bounded: warm, a chunk's scores and P·V took 2.1 µs
// against 3.6 cold; an L2 evict_first policy on the weights and ~40 KB less product code changed
// nothing (docs/PERFORMANCE.md).
// The backend takes it by default for layers of 24 MB or more (CudaOptions::decode_step): it
// measured 7 % ahead of the per-op graph on the 0.6B shape (31 MB per layer), 8 % on the 8B and
// 5–9 % on the 9B hybrid (docs/cuda.md).
#include <algorithm>

#include "backend/cuda/decode_step.h"
#include "backend/cuda/decode_step_attention.cuh"
#include "backend/cuda/decode_step_mixer.cuh"
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

using namespace step;

constexpr int kWarpsB = 16;
constexpr int kThreadsB = kWarpsB * 32;
constexpr int kUnrollD = 4;  // 16-byte weight loads per lane in flight per matrix
// Warps 0..attn_warps(hd)-1 of each block have a shared-memory buffer for one chunk's keys and
// values (StepArgs::kv_prefetch): a head's first chunks are prefetched (all of them up to 128
// keys for heads up to 128, 64 keys for heads of 256, whose buffers are twice the size).
__host__ __device__ constexpr int attn_warps(int hd) { return hd > 128 ? 2 : 4; }
static_assert(kStepMaxChunks <= kWarpsB, "a head's chunks are the warps of one block");
static_assert(kMixThreads == kThreadsB, "the mixer takes the step's block");

// The kernel's shared memory, byte offsets in order (each a multiple of 16): the phase's input
// vector xs, bf16 [max(H, I, nh·hd, Hv·Dv)]; each warp's q [kWarpsB][hd] f32; the staging
// slices [kWarpsB][2][kUnrollD][32] words (StepArgs::stage); the rotation at pos [hd] f32;
// then what phase 2 uses: in an attention layer the attention buffers of warps
// 0..attn_warps-1 (StepArgs::kv_prefetch) and the partials of a head's chunks
// [kStepMaxChunks][hd + 2] f32, in a Gated DeltaNet layer the mixer's region
// (mixer_smem_bytes) at the same offset. The kernel and smem_bytes both read it.
struct SmemLayout {
  size_t qs, slices, rot, kv, part, mix, total;
  __host__ __device__ explicit SmemLayout(const StepArgs& a) {
    qs = size_t(a.vec8) * 16;
    slices = qs + size_t(kWarpsB) * size_t(a.hd) * 4;
    rot = slices + (a.stage ? size_t(kWarpsB) * 2 * kUnrollD * 32 * 16 : 0);
    kv = rot + size_t(a.hd) * 4;
    part = kv + (a.kv_prefetch ? size_t(attn_warps(a.hd)) * attn_buf_bytes(a.hd) : 0);
    mix = kv;
    total = part + size_t(kStepMaxChunks) * size_t(a.hd + 2) * 4;
    if (a.hybrid && a.hv > 0 && mix + mixer_smem_bytes(a.dk, a.dv) > total)
      total = mix + mixer_smem_bytes(a.dk, a.dv);
  }
};

// Staging across a barrier: between arriving at the grid barrier and waiting there, each warp
// requests the first batch (kUnrollD words per lane) of the two weight rows its first pass of
// the next product phase reads, into its own slice of shared memory [2][kUnrollD][32]; that
// pass then takes them from there (the lane reads only what it copied: no barrier needed).

__device__ __forceinline__ void stage_first(uint4* slice, const uint4* w0, const uint4* w1, int in8,
                                            int lane, int from = 0) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint4* w = k == 0 ? w0 : w1;
#pragma unroll
    for (int u = 0; u < kUnrollD; ++u) {
      const int c = from + lane + u * 32;
      const bool ok = w != nullptr && c < in8;
      copy16_async(slice + (k * kUnrollD + u) * 32 + lane,
                   ok ? static_cast<const void*>(w + c) : static_cast<const void*>(slice), ok);
    }
  }
  copy16_commit();
}

// The thread that arrives at and polls the grid barrier: lane 0 of the last warp, which has no
// attention prefetch and rarely a chunk, so its poll does not queue behind the loads and the
// rotation that warp 0 starts in the barrier's wait (attention blocks left the barrier
// ~1–3 µs late when thread 0 polled).
constexpr int kBarrierThread = kThreadsB - 32;

// The grid barrier, split: every block arrives (its writes before it become visible to every
// block after the barrier), may then request weights that depend on nothing (staging), then
// waits for all arrivals. bar counts arrivals since the buffer was zeroed and is never reset:
// each barrier takes exactly gridDim.x of them, so it is complete when the count reaches the
// next multiple of gridDim.x after this block's own arrival (64 bits: it never wraps).
__device__ __forceinline__ unsigned long long grid_arrive(const StepArgs& a) {
  __syncthreads();
  unsigned long long target = 0;
  if (threadIdx.x == kBarrierThread) {
    // A release add: it orders the block's writes (made before the __syncthreads above) before
    // the arrival without a full fence; measured against __threadfence + atomicAdd it gave
    // +1.3 % (8B) and +5 % (0.6B) tokens/s. A reduction that returns nothing (red.release),
    // the target computed from the count read at the step's start, was slower:
    // 9B 226.0 → 217.7 t/s, the phases' waits and gate/up 1–3 µs longer.
    unsigned long long before;
    asm volatile("atom.add.release.gpu.u64 %0, [%1], 1;"
                 : "=l"(before)
                 : "l"(a.barrier)
                 : "memory");
    target = before - before % gridDim.x + gridDim.x;
  }
  return target;  // meaningful in kBarrierThread only
}
__device__ __forceinline__ void grid_wait(const StepArgs& a, unsigned long long target) {
  if (threadIdx.x == kBarrierThread) {  // acquire loads: every block's writes are visible
    auto arrived = [&] {
      unsigned long long n;
      asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(n) : "l"(a.barrier) : "memory");
      return n;
    };
    // (Polling without the sleep measured no faster: design-notes.md.)
    while (arrived() < target) __nanosleep(32);
  }
  __syncthreads();
}

// An input norm's gains requested into the L1 between a barrier's arrival and its wait (a line
// per 16-byte word of x this thread scales): they depend on nothing the step computes, and read
// after the block sum they put an L2 round trip between the barrier and the phase's first
// products, twice per layer. A hint, no registers held (in registers, the 9B's kernel spilled
// 160 bytes against 44); little else allocates in the L1 (weights, the step's products and the
// K/V copies bypass it). tg128 9B +0.4 %, 8B +0.5 %, 0.6B +0.8 % (docs/PERFORMANCE.md).
__device__ __forceinline__ void norm_gains_to_l1(const StepArgs& a, const void* gain) {
  const int esize = a.gain_dt == kF32 ? 4 : 2;
  for (int i = threadIdx.x; i < a.H / 8; i += blockDim.x)
    asm volatile(
        "prefetch.global.L1 [%0];" ::"l"(static_cast<const char*>(gain) + int64_t(i) * 8 * esize));
}

// xs[i] = bf16(x[i] · inv_rms(x) · (gain[i] + offset)), as stage_input (gemv_kernel.cuh)
// computes it.
__device__ void normalise_to_smem(const StepArgs& a, const __nv_bfloat16* x, const void* gain,
                                  uint4* xs) {
  const int in8 = a.H / 8;
  const uint4* x8 = reinterpret_cast<const uint4*>(x);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < in8; i += blockDim.x) {
    const uint4 v = __ldcg(x8 + i);
    xs[i] = v;
    ss = add_squares_bf16x8(v, ss);
  }
  const float inv = rsqrtf(block_sum(ss) / float(a.H) + a.eps);
  for (int i = threadIdx.x; i < in8; i += blockDim.x)
    xs[i] = scale_bf16x8(xs[i], inv, gain, a.gain_dt, i * 8, a.offset);
  __syncthreads();
}

// A bf16 vector produced in the step (by any block) into shared memory, by cp.async from the
// L2: every word requested before any is waited for. (A loop of loads and stores waited for each
// load before requesting the next: the MLP's hidden vector, three words per thread on the 8B and
// 9B, took three L2 round trips after the barrier instead of one; this way down is 0.4 µs shorter
// per layer, tg128 9B +0.3 %, 8B +0.3 %.) The wait also covers the thread's staged weights,
// which the phase's first pass reads next.
__device__ void stage_vector(const __nv_bfloat16* v, int n, uint4* xs) {
  const uint4* v8 = reinterpret_cast<const uint4*>(v);
  for (int i = threadIdx.x; i < n / 8; i += blockDim.x) copy16_async(xs + i, v8 + i, true);
  copy16_commit();
  copy16_wait_all();
  __syncthreads();
}

// w_row · xs over in8 16-byte words (the warp's sum, in every lane); with W2 also w2_row · xs.
// With `staged` set, the first batch comes from the warp's staged slice (stage_first), and with
// `staged2` also the second (the o rows' second slice, StepArgs::stage2).
template <bool TWO>
__device__ __forceinline__ void row_dot(const uint4* w, const uint4* w2, const uint4* xs, int in8,
                                        int lane, float& s1, float& s2,
                                        const uint4* staged = nullptr,
                                        const uint4* staged2 = nullptr) {
  float acc = 0.0f, acc2 = 0.0f;
  for (int c0 = lane; c0 < in8; c0 += 32 * kUnrollD) {
    uint4 wv[kUnrollD], uv[TWO ? kUnrollD : 1];
    const uint4* from = !staged                      ? nullptr
                        : c0 == lane                 ? staged
                        : c0 == lane + 32 * kUnrollD ? staged2
                                                     : nullptr;
    if (from) {
      copy16_wait_all();
#pragma unroll
      for (int u = 0; u < kUnrollD; ++u) {
        wv[u] = from[u * 32 + lane];
        if constexpr (TWO) uv[u] = from[(kUnrollD + u) * 32 + lane];
      }
    } else {
#pragma unroll
      for (int u = 0; u < kUnrollD; ++u) {
        const int c = c0 + u * 32;
        wv[u] = c < in8 ? ld_stream(w + c) : make_uint4(0, 0, 0, 0);
        if constexpr (TWO) uv[u] = c < in8 ? ld_stream(w2 + c) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnrollD; ++u) {
      const int c = c0 + u * 32;
      if (c < in8) {
        acc += dot8(wv[u], xs[c]);
        if constexpr (TWO) acc2 += dot8(uv[u], xs[c]);
      }
    }
  }
  s1 = warp_sum(acc);
  if constexpr (TWO) s2 = warp_sum(acc2);
}

// The rows [0, rows) of a phase's product, two per warp pass (rows r and r + step: 8 loads per
// lane in flight, as the GLU's two matrices): store(r, w_r · xs, early(r)) for each. row_w(r)
// is row r's weights; early(r) what the store reads that was written before the phase (the
// residual), requested before the row's weights so that the store does not wait for it after
// the sums.
// The first pass's rows (unit0, unit0 + step) may have been staged (`staged` non-null).
template <typename RowW, typename Early, typename Store>
__device__ __forceinline__ void product_rows(int rows, int in8, const uint4* xs, int unit0,
                                             int step, int lane, RowW row_w, Early early,
                                             Store store, const uint4* staged,
                                             const uint4* staged2 = nullptr) {
  for (int r = unit0; r < rows; r += 2 * step) {
    const int r2 = r + step;
    const uint4* st = r == unit0 ? staged : nullptr;
    const uint4* st2 = r == unit0 ? staged2 : nullptr;
    float e1 = 0.0f, e2 = 0.0f;
    if (lane == 0) {
      e1 = early(r);
      if (r2 < rows) e2 = early(r2);
    }
    float s1, s2 = 0.0f;
    if (r2 < rows)
      row_dot<true>(row_w(r), row_w(r2), xs, in8, lane, s1, s2, st, st2);
    else
      row_dot<false>(row_w(r), nullptr, xs, in8, lane, s1, s2, st, st2);
    if (lane == 0) {
      store(r, s1, e1);
      if (r2 < rows) store(r2, s2, e2);
    }
  }
}

// Phase 1's rows of a layer, one vector of products: an attention layer's q | k | v | output
// gate (bf16 into a.q onward), a Gated DeltaNet layer's qkv | z | b | a (f32 into a.lin).
template <bool HYBRID>
__device__ __forceinline__ int phase1_rows(const StepArgs& a, const StepLayerDev& L) {
  if (HYBRID && L.linear) return a.conv_c + a.hv * a.dv + 2 * a.hv;
  return (HYBRID && a.gated ? 2 : 1) * a.nh * a.hd + 2 * a.nkv * a.hd;
}
template <bool HYBRID>
__device__ __forceinline__ const uint4* phase1_row(const StepArgs& a, const StepLayerDev& L,
                                                   int r) {
  const int64_t in_h = a.H / 8;
  if (HYBRID && L.linear) {
    const int C = a.conv_c, VD = a.hv * a.dv;
    return r < C               ? L.in_qkv + r * in_h
           : r < C + VD        ? L.in_z + (r - C) * in_h
           : r < C + VD + a.hv ? L.in_b + (r - C - VD) * in_h
                               : L.in_a + (r - C - VD - a.hv) * in_h;
  }
  const int nq = a.nh * a.hd, nk = a.nkv * a.hd;
  return r < nq            ? L.q + r * in_h
         : r < nq + nk     ? L.k + (r - nq) * in_h
         : r < nq + 2 * nk ? L.v + (r - nq - nk) * in_h
                           : L.out_gate + (r - nq - 2 * nk) * in_h;
}

// HYBRID: layers may be Gated DeltaNet layers (StepLayerDev::linear), attention layers may have
// an output gate; a llama stack compiles without either.
template <int E, bool HYBRID>
__global__ void __launch_bounds__(kThreadsB, 1) decode_step_kernel(const StepArgs a) {
  extern __shared__ uint4 smem[];
  const SmemLayout at(a);
  char* const base = reinterpret_cast<char*>(smem);
  uint4* xs = smem;
  float* qs_all = reinterpret_cast<float*>(base + at.qs);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int G = gridDim.x;
  const int unit0 = blockIdx.x + G * warp, units_step = G * kWarpsB;
  const int hd = E * 32, nq = a.nh * hd;
  const int in_h = a.H / 8, in_q = nq / 8, in_i = a.I / 8, in_vd = a.hv * a.dv / 8;
  const int pos = a.pos_first[0], first = a.pos_first[1];
  // Attention's key chunks: at most kStepMaxChunks, 32 keys or more each.
  const int n_keys = pos - first + 1;
  const int nc = min((n_keys + 31) / 32, kStepMaxChunks), per = (n_keys + nc - 1) / nc;
  float* qs = qs_all + warp * hd;
  // This warp's staging slice, or null when staging is off.
  // The barrier thread's warp stages nothing, so that its poll does not queue behind its own
  // copies (9B +0.8 %, 0.6B +3 % tokens/s, 8B even).
  uint4* const slice = a.stage && warp != kBarrierThread / 32
                           ? reinterpret_cast<uint4*>(base + at.slices) + warp * 2 * kUnrollD * 32
                           : nullptr;
  auto is_linear = [](const StepLayerDev& L) { return HYBRID && L.linear; };
  // Requests the first batch of this warp's first pass over `rows` rows (two rows, or the
  // gate and up rows of one) into its slice.
  auto stage = [&](auto row_w, int rows, int in8, bool glu) {
    if (!slice) return;
    copy16_wait_all();  // no earlier copy of this thread may land after these
    if (unit0 >= rows) return;
    const int r2 = unit0 + units_step;
    if (glu) {
      stage_first(slice, row_w(unit0, 0), row_w(unit0, 1), in8, lane);
    } else {
      stage_first(slice, row_w(unit0, 0), r2 < rows ? row_w(r2, 0) : nullptr, in8, lane);
    }
  };
  // This warp's attention buffer, or null.
  char* const kv_buf =
      a.kv_prefetch && warp < attn_warps(hd) ? base + at.kv + warp * attn_buf_bytes(hd) : nullptr;
  float* const mix = reinterpret_cast<float*>(base + at.mix);    // the mixer's region (hybrid)
  float* const part = reinterpret_cast<float*>(base + at.part);  // the head's chunks' partials
  float* const rot = reinterpret_cast<float*>(base + at.rot);    // the rotation at pos
  // Attention: head hq in block hq mod G, its chunk c in warp c; with cross-block attention
  // (xattn: heads of 128 or 256 with more chunks than their block has buffered warps), unit
  // u = c·nh + hq in block u mod G, warp u / G (mod 16). This warp's first chunk (of head
  // head0, chunk chunk0, keys lo..hi), if it has one: its gains and rotation are gathered during
  // the barrier wait (the same for every head), and its keys and values prefetched when it has
  // a buffer and the chunk fits it.
  const bool xattn = (E == 8 || E == 4) && a.xattn && nc > attn_warps(hd);
  const int xu0 = blockIdx.x + G * warp, units = a.nh * nc;
  const bool has_head = int(blockIdx.x) < (xattn ? units : a.nh);
  const int head0 = xattn ? xu0 % a.nh : int(blockIdx.x), chunk0 = xattn ? xu0 / a.nh : warp;
  const bool first_chunk = xattn ? xu0 < units : has_head && warp < nc;
  // Chunk c's keys: [first + c·per, min(pos, first + c·per + per − 1)].
  auto chunk_keys = [&](int c) {
    const int lo = first + c * per;
    return int2{lo, min(pos, lo + per - 1)};
  };
  const auto [first_lo, first_hi] = chunk_keys(chunk0);
  const bool prefetch = kv_buf && first_chunk && per <= kChunkKeys;
  const uint4* staged = slice;  // what the phases pass on: null when staging is off
  // The o rows' second staged batch (StepArgs::stage2): this warp's slice in phase 2's region,
  // free once the block's attention is done and until phase 3 has read it. Llama stacks only:
  // a Gated DeltaNet layer keeps its state and conv rows there through phase 3, and in the
  // hybrid instances the code alone cost the 9B 0.4 %.
  uint4* const slice2 =
      !HYBRID && slice && a.stage2 && at.total - at.kv >= size_t(kWarpsB) * 2 * kUnrollD * 32 * 16
          ? reinterpret_cast<uint4*>(base + at.kv) + warp * 2 * kUnrollD * 32
          : nullptr;
  const bool has_lin_head = HYBRID && int(blockIdx.x) < a.hv;     // a Gated DeltaNet head
  if (has_head && a.rot_half > 0) rotation_to_smem(a, pos, rot);  // read after block barriers
  if (a.n_layers > 0) {
    stage([&](int r, int) { return phase1_row<HYBRID>(a, a.layers[0], r); },
          phase1_rows<HYBRID>(a, a.layers[0]), in_h, false);
    norm_gains_to_l1(a, a.layers[0].attn_norm);
  }
  for (int il = 0; il < a.n_layers; ++il) {
    const StepLayerDev L = a.layers[il];
    const bool linear = is_linear(L);
    const int in_o = linear ? in_vd : in_q;  // the o product's input, 16-byte words
    // 1. q | k | v [| output gate] = rms_norm(x) · w, or a Gated DeltaNet layer's products
    if (has_head && !linear && warp == kWarpsB - 1) prefetch_gains(a, L, lane);
    if (linear && has_lin_head) state_to_l2(a, L, blockIdx.x);
    normalise_to_smem(a, a.x, L.attn_norm, xs);
    product_rows(
        phase1_rows<HYBRID>(a, L), in_h, xs, unit0, units_step, lane,
        [&](int r) { return phase1_row<HYBRID>(a, L, r); }, [](int) { return 0.0f; },
        [&](int r, float s, float) {
          if (linear)
            a.lin[r] = s;  // f32, as the per-op path's Gated DeltaNet scratch
          else
            a.q[r] = __float2bfloat16(s);  // q, k, v, gate: one scratch
        },
        staged);
    unsigned long long bar = grid_arrive(a);
    stage([&](int r, int) { return L.o + int64_t(r) * in_o; }, a.H, in_o, false);
    // After stage(): its wait for earlier copies must not wait for these.
    HeadConsts<E> hc;
    MixConsts mc;
    if (linear) {
      if (has_lin_head) {
        prefetch_state(a, L, blockIdx.x, mix);
        load_mix_consts(a, L, blockIdx.x, mc);
      }
    } else {
      if (prefetch)
        prefetch_kv<E>(a, L, head0 / (a.nh / a.nkv), first_lo, first_hi, pos, kv_buf, lane);
      if (first_chunk) load_head_consts<E>(a, L, rot, lane, hc);
    }
    grid_wait(a, bar);
    if (linear) {
      // 2. the Gated DeltaNet mixer: a block per value head (decode_step_mixer.cuh).
      for (int h = blockIdx.x; h < a.hv; h += G) {
        if (h != int(blockIdx.x)) {
          __syncthreads();  // the previous head's shared memory is free
          load_mix_consts(a, L, h, mc);
        }
        mixer_head(a, L, h, mix, mc, h == int(blockIdx.x), h + G < a.hv);
      }
    } else if (xattn) {
      // 2. heads of 256 past 64 keys or of 128 past 128, a warp per chunk, the chunks of a
      // head in different blocks: each writes its partial to memory, and the head's last chunk
      // to finish (its count) combines them. In a block per head, a head of 256's two buffered
      // warps take the chunks in turn, each later chunk's keys requested only when its warp
      // comes to it, and a head of 128's chunks past its four buffered warps read the cache
      // directly, while the other blocks wait. tg384: 9B +1.5 %, 8B +0.9 %, 0.6B
      // +1–3 %; with fewer chunks the block per head is as fast, its combine in shared memory.
      for (int u = xu0; u < units; u += G * kWarpsB) {
        const int hq = u % a.nh, c = u / a.nh, hd_p = hd + 2;
        const auto [lo, hi] = chunk_keys(c);
        if (kv_buf && !(u == xu0 && prefetch))
          prefetch_kv<E>(a, L, hq / (a.nh / a.nkv), lo, hi, pos, kv_buf, lane);
        VecOf<E> gate{};  // the head's gate, should this chunk be its last
        if (HYBRID && a.gated)
          gate = __ldcg(reinterpret_cast<const VecOf<E>*>(a.og + hq * hd + lane * E));
        float* parts = a.xpart + int64_t(hq) * kStepMaxChunks * hd_p;
        chunk_attention<E, HYBRID>(a, L, hq, lo, hi, pos, qs, kv_buf, hc, parts + c * hd_p, lane);
        __threadfence();  // the partial before the count (the CUDA guide's last-block pattern)
        __syncwarp();
        int last = 0;
        if (lane == 0) last = atomicAdd(a.head_count + hq, 1) == nc - 1;
        if (__shfl_sync(0xffffffffu, last, 0)) {
          __threadfence();
          combine_chunks<E, HYBRID, true>(a, hq, nc, parts, gate, lane);
          if (lane == 0) a.head_count[hq] = 0;  // next read after two grid barriers
        }
      }
    } else {
      // 2. q/k norm, rope, cache store and attention: a block per query head, a warp per chunk
      // of its keys; the chunks' partials meet in shared memory, so a head's output costs no
      // global round trip after its chunks.
      for (int hq = blockIdx.x; hq < a.nh; hq += G) {
        // The combining warp's share of the head's output gate, requested now: it lands while
        // the warp computes its chunk.
        VecOf<E> gate{};
        if (HYBRID && a.gated && warp == 0)
          gate = __ldcg(reinterpret_cast<const VecOf<E>*>(a.og + hq * hd + lane * E));
        if constexpr (E == 8) {
          // Heads of 256 have buffers in warps 0 and 1 only: the chunks go to them in turn (c
          // in warp c mod 2), each but the prefetched one requested into the buffer as its warp
          // comes to it. Such a head measured ~40 µs with chunks 2 and 3 read
          // from the cache (a lane's 32 loads of its key's row run a few at a time for want of
          // registers, each an HBM round trip): one round trip per chunk is far cheaper.
          // (Without the prefetch, CudaOptions::decode_kv_prefetch, a chunk per warp, all from
          // the cache.)
          const int workers = a.kv_prefetch ? attn_warps(hd) : nc;
          for (int c = warp; c < nc && warp < workers; c += workers) {
            const auto [lo, hi] = chunk_keys(c);
            const bool ready = hq == int(blockIdx.x) && c == warp && prefetch;
            if (kv_buf && !ready)
              prefetch_kv<E>(a, L, hq / (a.nh / a.nkv), lo, hi, pos, kv_buf, lane);
            chunk_attention<E, HYBRID>(a, L, hq, lo, hi, pos, qs, kv_buf, hc, part + c * (hd + 2),
                                       lane);
          }
        } else if (warp < nc) {
          const auto [lo, hi] = chunk_keys(warp);
          chunk_attention<E, HYBRID>(a, L, hq, lo, hi, pos, qs,
                                     hq == int(blockIdx.x) && prefetch ? kv_buf : nullptr, hc,
                                     part + warp * (hd + 2), lane);
        }
        __syncthreads();
        if (warp == 0) combine_chunks<E, HYBRID>(a, hq, nc, part, gate, lane);
        if (hq + G < a.nh) __syncthreads();  // part is rewritten
      }
    }
    bar = grid_arrive(a);
    const bool o_staged2 = slice2 && !linear && unit0 < a.H && in_o > 32 * kUnrollD;
    if (o_staged2) {
      const int r2 = unit0 + units_step;
      stage_first(slice2, L.o + int64_t(unit0) * in_o,
                  r2 < a.H ? L.o + int64_t(r2) * in_o : nullptr, in_o, lane, 32 * kUnrollD);
    }
    // What the block's heads' conv shifts read, requested now (conv_rows_request).
    if (linear)
      for (int h = blockIdx.x, k = 0; h < a.hv; h += G, ++k)
        conv_rows_request(a, L, h, conv_rows_smem(a, mix, k));
    grid_wait(a, bar);
    // 3. x += o · attn (the mixer's output)
    stage_vector(a.attn, in_o * 8, xs);
    auto residual = [&](int r) { return bf(__ldcg(a.x + r)); };
    auto add_to_x = [&](int r, float s, float x) { a.x[r] = __float2bfloat16(x + bf_round(s)); };
    product_rows(
        a.H, in_o, xs, unit0, units_step, lane, [&](int r) { return L.o + int64_t(r) * in_o; },
        residual, add_to_x, staged, o_staged2 ? slice2 : nullptr);
    if (linear) {  // every block has read the conv states (phase 2)
      for (int h = blockIdx.x, k = 0; h < a.hv; h += G, ++k) {
        conv_rows_store(a, L, h, conv_rows_smem(a, mix, k));
        if (h + G >= a.hv) state_write_back(a, L, h, mix);  // the block's last head
      }
    }
    bar = grid_arrive(a);
    auto gate_up_row = [&](int r, int m) { return (m == 0 ? L.gate : L.up) + int64_t(r) * in_h; };
    stage(gate_up_row, a.I, in_h, true);
    norm_gains_to_l1(a, L.ffn_norm);
    grid_wait(a, bar);
    // 4. h = act(gate · rms_norm(x)) ⊙ (up · rms_norm(x))
    normalise_to_smem(a, a.x, L.ffn_norm, xs);
    for (int r = unit0; r < a.I; r += units_step) {
      float sg, su;
      row_dot<true>(L.gate + int64_t(r) * in_h, L.up + int64_t(r) * in_h, xs, in_h, lane, sg, su,
                    r == unit0 ? staged : nullptr);
      if (lane == 0) a.h[r] = __float2bfloat16(activation_f(a.act, sg) * su);
    }
    bar = grid_arrive(a);
    auto down_row = [&](int r, int) { return L.down + int64_t(r) * in_i; };
    stage(down_row, a.H, in_i, false);
    grid_wait(a, bar);
    // 5. x += down · h
    stage_vector(a.h, a.I, xs);
    product_rows(
        a.H, in_i, xs, unit0, units_step, lane, [&](int r) { return L.down + int64_t(r) * in_i; },
        residual, add_to_x, staged);
    bar = grid_arrive(a);
    auto next_row = [&](int r, int) { return phase1_row<HYBRID>(a, a.layers[il + 1], r); };
    if (il + 1 < a.n_layers) {
      stage(next_row, phase1_rows<HYBRID>(a, a.layers[il + 1]), in_h, false);
      norm_gains_to_l1(a, a.layers[il + 1].attn_norm);
    }
    grid_wait(a, bar);
  }
  if (slice) copy16_wait_all();
}

// The kernel's instances: llama stacks with heads of 64 or 128, hybrid stacks with heads of 128
// or 256.
const void* kernel_for(const StepArgs& a) {
  if (a.hybrid)
    return a.hd == 128 ? reinterpret_cast<const void*>(decode_step_kernel<4, true>)
                       : reinterpret_cast<const void*>(decode_step_kernel<8, true>);
  return a.hd == 64 ? reinterpret_cast<const void*>(decode_step_kernel<2, false>)
                    : reinterpret_cast<const void*>(decode_step_kernel<4, false>);
}

size_t smem_bytes(const StepArgs& a) { return SmemLayout(a).total; }

}  // namespace

bool decode_step_fits(const StepArgs& a) {
  if (a.hybrid ? a.hd != 128 && a.hd != 256 : a.hd != 64 && a.hd != 128) return false;
  if (a.H % 8 || a.I % 8 || a.nh < 1 || a.nkv < 1 || a.nh % a.nkv) return false;
  if (a.rot_half % 32 || 2 * a.rot_half > a.hd) return false;
  if (a.hybrid && a.hv > 0) {
    // Gated DeltaNet heads: a conv channel per thread, whole column quads per row lane.
    const int nq4 = a.dv / 4;
    if (a.hk < 1 || a.hv < a.hk || a.hv % a.hk || a.dk < 4 || a.dk % 4 || a.dv < 4 || a.dv % 4 ||
        kThreadsB % nq4 || 2 * a.dk + a.dv > kThreadsB || a.conv_k < 2 || a.conv_k > kMaxTaps ||
        (a.hv * a.dv) % 8 || a.conv_c != 2 * a.hk * a.dk + a.hv * a.dv)
      return false;
    // A block's heads' conv rows wait in the mixer's reduction buffers (conv_rows_fit).
    if (a.blocks < 1 || !conv_rows_fit(a, (a.hv + a.blocks - 1) / a.blocks)) return false;
  }
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      smem_bytes(a) > size_t(optin)) {
    cudaGetLastError();
    return false;
  }
  int blocks = 0;
  const void* k = kernel_for(a);
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes(a))) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreadsB, smem_bytes(a)) !=
          cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return blocks >= 1;  // one block per SM must fit, or the grid barrier could never complete
}

void decode_step(Ctx& ctx, const StepArgs& a) {
  const size_t smem = smem_bytes(a);
  const int blocks = a.blocks;  // at most the SM count (CudaBackend::decode_blocks_)
  void* args[] = {const_cast<StepArgs*>(&a)};
  HEARTH_CUDA_CHECK(
      cudaLaunchKernel(kernel_for(a), dim3(blocks), dim3(kThreadsB), args, smem, ctx.stream));
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
