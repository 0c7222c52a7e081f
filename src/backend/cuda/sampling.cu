// Picking the next token on the GPU (Backend::pick_token), so a decode step sends the host one
// int32 instead of the whole logits row. The row (f32, in L2 after the head GEMV wrote it) is
// cut into one contiguous chunk per block, over a grid of about two blocks per SM: one block
// alone needed ~0.1 ms for a 152k-entry argmax and ~12 ms for the sampling passes.
// - greedy: argmax, ties to the lowest id, exactly as the host (NaN never wins);
// - sampling: the host's chain (temperature, top-k, top-p, min-p, draw) without sorting. Each
//   truncation is a threshold on the scaled logit found by radix selection over its orderable
//   bits (digits of 11, 11 and 10 bits, one kernel each; the first digit's 11 bits reach two
//   mantissa bits, so typical logits spread over a few dozen bins instead of piling into the
//   3–4 that sign and exponent alone give): top-k counts tokens, top-p sums probability mass.
//   Masses are fixed-point integers (2^18 = probability of the top token; a token below 2^-18 of it
//   weighs nothing), so sums do not depend on the order of the atomic adds and a seeded run repeats
//   exactly. Tokens tied at a threshold are admitted lowest id first, as on the host: the
//   selections only count how many ties pass, and the draw walks the ties in id order. The draw
//   lays the survivors out in another order than the host's (the admitted ties, then the rest in id
//   order), so one u may give another token, but each token's share of [0, 1) is its probability on
//   both.
// The pick is seven kernels launched back to back (PDL, and one CUDA graph in decode): the max,
// two more top-k digits, three top-p digits, the draw. Each block writes a partial or adds its
// shared-memory histogram into global bins; the last block to arrive (a counter after a fence)
// finishes the phase: it reduces the partials in block order, picks the digit, zeroes what it
// consumed and resets the counter, so every replay starts from clean scratch with no host
// memset. The settings, the draw and the phase state live in device memory, so a captured
// graph serves every request: kernels whose stage is off (all but the first for greedy) return
// at once.
#include <algorithm>
#include <climits>
#include <deque>
#include <mutex>
#include <vector>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kBins = 2048;  // the widest digit (11 bits)
// Digits of the 32-bit key, high first: bits [31:21], [20:10], [9:0].
__host__ __device__ constexpr int digit_shift(int d) { return d == 0 ? 21 : d == 1 ? 10 : 0; }
__host__ __device__ constexpr uint32_t digit_mask(int d) { return d == 2 ? 1023u : 2047u; }
constexpr int kUnroll = 4;  // float4 loads in flight per thread
constexpr int kMaxBlocks = 1024;
// Elements per block at most, so a block's fixed-point mass (≤ 2^18 each) fits 32-bit shared
// bins: 8192 · 2^18 = 2^31.
constexpr int kMaxChunk = 8192;
constexpr float kFixedOne = 262144.0f;  // 2^18

// The phase state, written only by the last block of a kernel and read by the next kernels.
struct State {
  uint32_t counter;  // blocks of the running kernel that have finished their share
  uint32_t done;     // *out is written (greedy, or nothing to sample): later kernels return
  float m;           // the largest scaled logit
  int32_t argmax;
  // The radix selection in progress: the digits chosen so far and what is still to be found
  // below them (a count for top-k, a mass for top-p).
  uint32_t sel_on, sel_prefix;
  unsigned long long sel_rem;
  // Finished cuts: keys above `key` pass; of the tokens whose key equals it, the first `ties`
  // in id order pass too.
  uint32_t k_on, k_key;
  unsigned long long k_ties;
  uint32_t p_on, p_key;
  unsigned long long p_ties;
};

struct Scratch {
  State state;
  unsigned long long bins[kBins];  // zero between kernels: the consumer clears them
  float part_v[kMaxBlocks];        // per-block partials, overwritten every pick
  int32_t part_i[kMaxBlocks];
  unsigned long long part_count[kMaxBlocks], part_mass[kMaxBlocks];
};

struct Args {
  const float* x;
  int n, groups, chunk;  // groups of 4 elements; `chunk` groups per block
  int vec;               // x is 16-byte aligned: whole groups load as float4
  const PickDyn* dyn;
  int32_t* out;
  Scratch* s;
  int64_t row_stride;  // elements from one row's logits to the next (pick_tokens)
  // Row blockIdx.y's own logits, settings, token and scratch: rows are independent picks.
  __device__ Args row(unsigned r) const {
    Args a = *this;
    a.x += int64_t(r) * row_stride;
    a.dyn += r;
    a.out += r;
    a.s += r;
    return a;
  }
};

struct Smem {
  uint32_t hist[kBins];
  unsigned long long warp_tot[kWarps];
  float wv[kWarps];
  int wi[kWarps];
  int last, digit, found, bstar;
  unsigned long long rem, btarget;
};

// Larger float → larger key (a bijection on bit patterns, so equal keys are equal values).
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float value_of(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The scaled logit and its mass. Explicitly rounded operations: the same token must weigh the
// same in every kernel and in the last block's walk, which a contracted multiply-add would not
// guarantee.
__device__ __forceinline__ float scaled(float l, float inv_t) { return __fmul_rn(l, inv_t); }
__device__ __forceinline__ uint32_t fixed_mass(float v, float m) {
  return __float2uint_rn(__expf(__fsub_rn(v, m)) * kFixedOne);
}
__device__ __forceinline__ bool valid(float l) { return l > -INFINITY; }  // NaN fails too

// Greedy order: larger value, then lower id. NaN never compares better, so it never wins.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void block_range(const Args& a, int b, int& g0, int& g1) {
  g0 = b * a.chunk;
  g1 = min(a.groups, g0 + a.chunk);
}

__device__ __forceinline__ float4 nan4() {
  const float nan = __int_as_float(0x7fc00000);
  return make_float4(nan, nan, nan, nan);
}

// Elements 4·gi … 4·gi+3; past the end of the row they read as NaN, which every phase skips.
__device__ __forceinline__ float4 load4(const Args& a, int gi) {
  const int i = gi * 4;
  if (a.vec && i + 4 <= a.n) return reinterpret_cast<const float4*>(a.x)[gi];
  const float nan = __int_as_float(0x7fc00000);
  float4 r;
  r.x = i < a.n ? a.x[i] : nan;
  r.y = i + 1 < a.n ? a.x[i + 1] : nan;
  r.z = i + 2 < a.n ? a.x[i + 2] : nan;
  r.w = i + 3 < a.n ? a.x[i + 3] : nan;
  return r;
}

// f(l, i) for every element of this block's chunk, kUnroll float4 loads in flight per thread.
// The order of the calls is not index order: only order-independent results may come of it.
template <typename F>
__device__ __forceinline__ void for_chunk(const Args& a, F&& f) {
  int g0, g1;
  block_range(a, blockIdx.x, g0, g1);
  for (int base = g0 + int(threadIdx.x); base < g1; base += kThreads * kUnroll) {
    float4 q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int gi = base + u * kThreads;
      q[u] = gi < g1 ? load4(a, gi) : nan4();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = (base + u * kThreads) * 4;
      f(q[u].x, i);
      f(q[u].y, i + 1);
      f(q[u].z, i + 2);
      f(q[u].w, i + 3);
    }
  }
}

// Exclusive prefix sum over the block in thread order; *total gets the sum.
__device__ unsigned long long block_scan(unsigned long long v, Smem& sh,
                                         unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();  // warp_tot may still be read by the previous call
  if (lane == 31) sh.warp_tot[warp] = incl;
  __syncthreads();
  unsigned long long before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const unsigned long long t = sh.warp_tot[w];
    before += w < warp ? t : 0;
    all += t;
  }
  *total = all;
  return before + incl - v;
}

// (value, id) of the block's best; every thread gets it.
__device__ void block_best(float& v, int& i, Smem& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  __syncthreads();  // wv/wi may still be read by the previous call
  if (lane == 0) {
    sh.wv[warp] = v;
    sh.wi[warp] = i;
  }
  __syncthreads();
  v = sh.wv[0];
  i = sh.wi[0];
  for (int w = 1; w < kWarps; ++w)
    if (better(sh.wv[w], sh.wi[w], v, i)) {
      v = sh.wv[w];
      i = sh.wi[w];
    }
}

__device__ void zero_hist(Smem& sh) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist[b] = 0;
  __syncthreads();
}

// Adds the block's histogram into the global bins (integers: the sum is order-independent).
__device__ void flush_hist(const Smem& sh, unsigned long long* bins) {
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kThreads)
    if (sh.hist[b]) atomicAdd(&bins[b], static_cast<unsigned long long>(sh.hist[b]));
}

// Whether this block is the last of the grid to finish its share. Every thread fences its
// own global writes (partials, bin adds) before the barrier, so they are visible device-wide
// before thread 0's count; the last block's fence after the count orders its later reads
// after every other block's writes. The last block resets the counter when it is done.
__device__ bool last_to_arrive(Scratch* s, Smem& sh) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t before = atomicAdd(&s->state.counter, 1u);
    __threadfence();
    sh.last = before == gridDim.x - 1;
  }
  __syncthreads();
  const bool last = sh.last;
  if (last) __threadfence();
  return last;
}

// The phase state as left by the previous kernel (through L2: other blocks wrote it).
__device__ State load_state(const Scratch* s) {
  const State* p = &s->state;
  State t;
  t.counter = 0;
  t.done = __ldcg(&p->done);
  t.m = __ldcg(&p->m);
  t.argmax = __ldcg(&p->argmax);
  t.sel_on = __ldcg(&p->sel_on);
  t.sel_prefix = __ldcg(&p->sel_prefix);
  t.sel_rem = __ldcg(&p->sel_rem);
  t.k_on = __ldcg(&p->k_on);
  t.k_key = __ldcg(&p->k_key);
  t.k_ties = __ldcg(&p->k_ties);
  t.p_on = __ldcg(&p->p_on);
  t.p_key = __ldcg(&p->p_key);
  t.p_ties = __ldcg(&p->p_ties);
  return t;
}

struct Digit {
  uint32_t digit;
  unsigned long long rem, total;
};

// Last block: reads (and zeroes) the global bins, adds `extra` to bin `extra_bin` (-1: none),
// and finds the digit where the sum from the top bin down reaches `rem` (frac ≥ 0: the target
// is max(1, frac · total), top-p's first digit). rem becomes what is left inside that bin.
__device__ Digit select_digit(unsigned long long* bins, int extra_bin, unsigned long long extra,
                              unsigned long long rem, float frac, Smem& sh) {
  constexpr int kPer = kBins / kThreads;
  const int top = kBins - 1 - int(threadIdx.x) * kPer;  // this thread's bins, top down
  unsigned long long c[kPer], local = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int b = top - j;
    c[j] = __ldcg(&bins[b]);
    bins[b] = 0;
    if (b == extra_bin) c[j] += extra;
    local += c[j];
  }
  unsigned long long total;
  const unsigned long long before = block_scan(local, sh, &total);
  if (frac >= 0.0f) {
    const unsigned long long t = static_cast<unsigned long long>(double(frac) * double(total));
    rem = t > 1 ? t : 1;
  }
  if (threadIdx.x == 0) {  // only kept if the target exceeds the total (inconsistent state)
    sh.digit = 0;
    sh.rem = rem;
  }
  __syncthreads();
  if (before < rem && rem - before <= local) {  // exactly one thread
    unsigned long long r = rem - before;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (c[j] >= r) {
        sh.digit = top - j;
        sh.rem = r;
        break;
      }
      r -= c[j];
    }
  }
  __syncthreads();
  return {uint32_t(sh.digit), sh.rem, total};
}

// Phase 0: the max (greedy's answer) and, when top-k is on, its first digit's histogram.
__device__ void phase_max(const Args& a, Smem& sh) {
  const PickDyn p = *a.dyn;
  const bool sample = p.temperature > 0.0f;
  const float inv_t = sample ? 1.0f / p.temperature : 1.0f;
  const bool hist = sample && p.top_k > 0;
  if (hist) zero_hist(sh);
  float bv = -INFINITY;
  int bi = INT_MAX;
  for_chunk(a, [&](float l, int i) {
    const float v = sample ? scaled(l, inv_t) : l;
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
    if (hist && valid(l)) atomicAdd(&sh.hist[key_of(v) >> digit_shift(0)], 1u);
  });
  block_best(bv, bi, sh);
  Scratch* s = a.s;
  if (threadIdx.x == 0) {
    s->part_v[blockIdx.x] = bv;
    s->part_i[blockIdx.x] = bi;
  }
  if (hist) flush_hist(sh, s->bins);
  if (!last_to_arrive(s, sh)) return;

  // Last block: the partials in block order.
  bv = -INFINITY;
  bi = INT_MAX;
  for (int b = threadIdx.x; b < int(gridDim.x); b += kThreads) {
    const float v = __ldcg(&s->part_v[b]);
    const int i = __ldcg(&s->part_i[b]);
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  block_best(bv, bi, sh);
  const int argmax = bi < a.n ? bi : 0;  // an all-NaN row
  State& st = s->state;
  if (!sample || !(bv > -INFINITY)) {
    // Greedy, or no token can be sampled (the host then picks 0, as does argmax of all -inf).
    if (hist) select_digit(s->bins, -1, 0, 1, -1.0f, sh);  // only zeroes the bins
    if (threadIdx.x == 0) {
      *a.out = sample ? 0 : argmax;
      st.done = 1;
      st.counter = 0;
    }
    return;
  }
  Digit d{0, 0, 0};
  if (hist) d = select_digit(s->bins, -1, 0, static_cast<unsigned long long>(p.top_k), -1.0f, sh);
  if (threadIdx.x == 0) {
    st.done = 0;
    st.m = bv;
    st.argmax = argmax;
    st.k_on = 0;
    st.p_on = 0;
    // top-k cuts only when fewer tokens than the valid ones are kept (d.total counts them).
    st.sel_on = hist && static_cast<unsigned long long>(p.top_k) < d.total;
    st.sel_prefix = d.digit << digit_shift(0);
    st.sel_rem = d.rem;
    st.counter = 0;
  }
}

// Phases 1–5: one digit of the top-k selection (count, digits 1 and 2; digit 0 rode with the
// max) or of the top-p selection (mass, digits 0–2, over the top-k survivors).
template <int D, bool Mass>
__device__ void phase_digit(const Args& a, Smem& sh) {
  const PickDyn p = *a.dyn;
  Scratch* s = a.s;
  const State st = load_state(s);
  // Uniform over the grid: when the stage is off no block counts itself in.
  if (st.done) return;
  if (Mass ? (!(p.top_p < 1.0f) || (D > 0 && !st.sel_on)) : !st.sel_on) return;
  const float inv_t = 1.0f / p.temperature, m = st.m;
  constexpr int kShift = digit_shift(D);
  constexpr int kHigh = digit_shift(D > 0 ? D - 1 : 0);  // above it: the digits found so far
  const uint32_t high = D > 0 ? st.sel_prefix >> kHigh : 0;
  zero_hist(sh);
  for_chunk(a, [&](float l, int) {
    if (!valid(l)) return;
    const float v = scaled(l, inv_t);
    const uint32_t key = key_of(v);
    if (D > 0 && (key >> kHigh) != high) return;
    // Below the top-k cut, or tied at it: the admitted ties are added by the last block.
    if (Mass && st.k_on && key <= st.k_key) return;
    atomicAdd(&sh.hist[(key >> kShift) & digit_mask(D)], Mass ? fixed_mass(v, m) : 1u);
  });
  flush_hist(sh, s->bins);
  if (!last_to_arrive(s, sh)) return;

  int extra_bin = -1;
  unsigned long long extra = 0;
  if (Mass && st.k_on && (D == 0 || (st.k_key >> kHigh) == high)) {
    extra_bin = int((st.k_key >> kShift) & digit_mask(D));
    extra = st.k_ties * fixed_mass(value_of(st.k_key), m);
  }
  const bool first_mass = Mass && D == 0;
  const Digit d = select_digit(s->bins, extra_bin, extra, first_mass ? 0 : st.sel_rem,
                               first_mass ? p.top_p : -1.0f, sh);
  if (threadIdx.x == 0) {
    State& out = s->state;
    const uint32_t prefix = (D > 0 ? st.sel_prefix : 0u) | (d.digit << kShift);
    if (D < 2) {
      out.sel_on = 1;
      out.sel_prefix = prefix;
      out.sel_rem = d.rem;
    } else if (Mass) {
      // Ties at the key: as many (each the same mass) as it takes to reach the target.
      const unsigned long long each = max(1u, fixed_mass(value_of(prefix), m));
      out.sel_on = 0;
      out.p_on = 1;
      out.p_key = prefix;
      out.p_ties = (d.rem + each - 1) / each;
    } else {
      out.sel_on = 0;
      out.k_on = 1;
      out.k_key = prefix;
      out.k_ties = d.rem;
    }
    out.counter = 0;
  }
}

// Phase 6: the draw. Survivors are the tokens above the tighter cut that reach min-p, plus the
// cut's first `ties` tied tokens in id order (if their value reaches min-p). The draw lays the
// ties first, then the others in id order, and finds where u · total falls: each block sums
// its chunk, the last block finds the chunk from the sums in block order, then walks it.
__device__ void phase_draw(const Args& a, Smem& sh) {
  const PickDyn p = *a.dyn;
  Scratch* s = a.s;
  const State st = load_state(s);
  if (st.done) return;
  const float inv_t = 1.0f / p.temperature, m = st.m;
  // min-p keeps p ≥ min_p · p_max, i.e. v ≥ m + ln(min_p).
  const float floor_v = p.min_p > 0.0f ? m + logf(p.min_p) : -INFINITY;
  // top-p selects among the top-k survivors, so its key is never below top-k's, and when they
  // are equal its tie count is within top-k's.
  const bool cut = st.p_on || st.k_on;
  const uint32_t cut_key = st.p_on ? st.p_key : st.k_key;
  const unsigned long long cut_ties = st.p_on ? st.p_ties : st.k_ties;

  unsigned long long ties = 0, mass = 0;
  for_chunk(a, [&](float l, int) {
    if (!valid(l)) return;
    const float v = scaled(l, inv_t);
    const uint32_t key = key_of(v);
    if (cut && key == cut_key)
      ++ties;
    else if ((!cut || key > cut_key) && v >= floor_v)
      mass += fixed_mass(v, m);
  });
  unsigned long long block_ties, block_mass;
  block_scan(ties, sh, &block_ties);
  block_scan(mass, sh, &block_mass);
  if (threadIdx.x == 0) {
    s->part_count[blockIdx.x] = block_ties;
    s->part_mass[blockIdx.x] = block_mass;
  }
  if (!last_to_arrive(s, sh)) return;

  // Last block: the per-block sums in block order (each thread a run of consecutive blocks).
  constexpr int kPer = kMaxBlocks / kThreads;
  const int n_blocks = int(gridDim.x);
  const int per = (n_blocks + kThreads - 1) / kThreads;
  const int b0 = int(threadIdx.x) * per;
  unsigned long long bc[kPer], bm[kPer], local_c = 0, local_m = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int b = b0 + j;
    const bool in = j < per && b < n_blocks;
    bc[j] = in ? __ldcg(&s->part_count[b]) : 0;
    bm[j] = in ? __ldcg(&s->part_mass[b]) : 0;
    local_c += bc[j];
    local_m += bm[j];
  }
  unsigned long long all_ties, all_mass;
  const unsigned long long before_c = block_scan(local_c, sh, &all_ties);
  const unsigned long long before_m = block_scan(local_m, sh, &all_mass);
  const float cut_v = value_of(cut_key);
  const unsigned long long each = cut ? fixed_mass(cut_v, m) : 0;
  const unsigned long long admitted =
      cut && cut_v >= floor_v ? (cut_ties < all_ties ? cut_ties : all_ties) : 0;
  const unsigned long long tie_mass = admitted * each, total = tie_mass + all_mass;
  int32_t pick = st.argmax;  // only if the survivors weigh nothing (a +inf logit)
  if (total > 0) {
    const double x = p.u * double(total);  // u in [0, 1); clamped all the same
    const unsigned long long r = x >= double(total) ? total - 1
                                 : x > 0.0          ? static_cast<unsigned long long>(x)
                                                    : 0;
    const bool in_ties = r < tie_mass;
    const unsigned long long target = in_ties ? r / each : r - tie_mass;
    // The block whose share holds the target, and the target inside it.
    if (threadIdx.x == 0) sh.bstar = -1;
    __syncthreads();
    const unsigned long long before = in_ties ? before_c : before_m;
    const unsigned long long local = in_ties ? local_c : local_m;
    if (before <= target && target - before < local) {  // exactly one thread
      unsigned long long t = target - before;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const unsigned long long w = in_ties ? bc[j] : bm[j];
        if (t < w) {
          sh.bstar = b0 + j;
          sh.btarget = t;
          break;
        }
        t -= w;
      }
    }
    __syncthreads();
    const int bstar = sh.bstar;
    const unsigned long long btarget = sh.btarget;
    if (bstar >= 0) {
      // Walk that chunk in id order: tiles of one group per thread, a block scan per tile.
      int g0, g1;
      block_range(a, bstar, g0, g1);
      if (threadIdx.x == 0) sh.found = -1;
      unsigned long long base = 0;
      for (int t0 = g0; t0 < g1; t0 += kThreads) {
        const int gi = t0 + int(threadIdx.x);
        const float4 q = gi < g1 ? load4(a, gi) : nan4();
        const float ls[4] = {q.x, q.y, q.z, q.w};
        unsigned long long w[4], mine = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w[j] = 0;
          if (!valid(ls[j])) continue;
          const float v = scaled(ls[j], inv_t);
          const uint32_t key = key_of(v);
          if (in_ties)
            w[j] = key == cut_key ? 1 : 0;
          else if ((!cut || key > cut_key) && v >= floor_v)
            w[j] = fixed_mass(v, m);
          mine += w[j];
        }
        unsigned long long tile;
        const unsigned long long excl = base + block_scan(mine, sh, &tile);
        if (excl <= btarget && btarget - excl < mine) {  // exactly one thread
          unsigned long long t = btarget - excl;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (t < w[j]) {
              sh.found = gi * 4 + j;
              break;
            }
            t -= w[j];
          }
        }
        base += tile;
        __syncthreads();
        if (sh.found >= 0) break;  // uniform: read after the barrier
      }
      __syncthreads();
      if (sh.found >= 0) pick = sh.found;
    }
  }
  if (threadIdx.x == 0) {
    *a.out = pick;
    s->state.counter = 0;
  }
}

// Every phase waits for the previous kernel (the logits, the state) first, even one that
// then returns at once: a dependent launched early by PDL waits only for its direct
// predecessor, so that one must not finish before the kernel before it.
template <int Phase>
__global__ void __launch_bounds__(kThreads) pick_kernel(const Args rows) {
  __shared__ Smem sh;
  pdl_trigger();
  pdl_wait();
  const Args a = rows.row(blockIdx.y);
  if constexpr (Phase == 0)
    phase_max(a, sh);
  else if constexpr (Phase <= 2)
    phase_digit<Phase, false>(a, sh);
  else if constexpr (Phase <= 5)
    phase_digit<Phase - 3, true>(a, sh);
  else
    phase_draw(a, sh);
}

// Scratch per (device, stream): two backends on one device may pick at the same time. `s`
// serves pick_token (captured graphs hold its address, so it never moves); `rows` serves
// pick_tokens, which is never captured, and grows with the rows.
struct ScratchSlot {
  int device;
  cudaStream_t stream;
  Scratch* s;
  Scratch* rows = nullptr;
  int64_t n_rows = 0;
};
std::mutex g_mu;
std::deque<ScratchSlot> g_slots;  // a deque: slots stay where they are as others come

ScratchSlot& slot_for(const Ctx& ctx);

Scratch* scratch_for(const Ctx& ctx) { return slot_for(ctx).s; }

// Scratch for n rows of pick_tokens, zeroed when new (the kernels leave it zeroed after a pick).
Scratch* row_scratch_for(const Ctx& ctx, int64_t n) {
  ScratchSlot& e = slot_for(ctx);
  std::lock_guard<std::mutex> lock(g_mu);
  if (e.n_rows < n) {
    // The old rows may still be read by picks in flight on this stream.
    const int64_t want = std::max<int64_t>(n, 2 * e.n_rows);
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    if (e.rows) HEARTH_CUDA_CHECK(cudaFree(e.rows));
    e.rows = nullptr;
    e.n_rows = 0;
    void* p = nullptr;
    HEARTH_CUDA_CHECK(cudaMalloc(&p, size_t(want) * sizeof(Scratch)));
    HEARTH_CUDA_CHECK(cudaMemsetAsync(p, 0, size_t(want) * sizeof(Scratch), ctx.stream));
    e.rows = static_cast<Scratch*>(p);
    e.n_rows = want;
  }
  return e.rows;
}

ScratchSlot& slot_for(const Ctx& ctx) {
  int device = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(g_mu);
  for (ScratchSlot& e : g_slots)
    if (e.device == device && e.stream == ctx.stream) return e;
  // First use. pick_token_init does this outside any capture; should the first use be under
  // capture anyway, the allocation is allowed there in relaxed mode and the zeroing becomes
  // part of the graph (harmless: it runs before the pick and clears what is already clear).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  HEARTH_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, sizeof(Scratch));
  HEARTH_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  HEARTH_CUDA_CHECK(err);
  HEARTH_CUDA_CHECK(cudaMemsetAsync(p, 0, sizeof(Scratch), ctx.stream));
  g_slots.push_back({device, ctx.stream, static_cast<Scratch*>(p)});
  return g_slots.back();
}

// The picks of `rows` rows of `n` logits each (`a` filled but for the sizes): every kernel of
// the chain serves all rows at once, a grid row per logits row.
void launch_picks(Ctx& ctx, Args a, int64_t n, int64_t rows, bool greedy_only) {
  if (n > int64_t(kMaxBlocks) * kMaxChunk)
    cuda_fail("pick_token", "vocabulary larger than 8M entries", __FILE__, __LINE__);
  if (rows > 65535) cuda_fail("pick_tokens", "more than 65535 rows", __FILE__, __LINE__);
  a.n = int(n);
  a.groups = int(n + 3) / 4;
  if (a.groups < 1) a.groups = 1;  // an empty row still writes a token (0)
  // About two blocks per SM over all rows, more when chunks would exceed kMaxChunk, never an
  // empty block.
  const int max_group_chunk = kMaxChunk / 4;
  const int per_row = int((2 * std::max<int64_t>(ctx.sm_count, 1) + rows - 1) / rows);
  int blocks = std::max(per_row, (a.groups + max_group_chunk - 1) / max_group_chunk);
  blocks = std::min({blocks, a.groups, kMaxBlocks});
  a.chunk = (a.groups + blocks - 1) / blocks;
  blocks = (a.groups + a.chunk - 1) / a.chunk;
  a.vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.row_stride % 4 == 0;
  const dim3 grid{unsigned(blocks), unsigned(rows)}, block{unsigned(kThreads)};
  launch_pdl(ctx, pick_kernel<0>, grid, block, 0, a);
  // Greedy: kernel 0 wrote the token and left the scratch clean (bins zeroed, state rewritten
  // by every pick's first kernel), so the sampling stages need not run at all.
  if (greedy_only) {
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  launch_pdl(ctx, pick_kernel<1>, grid, block, 0, a);
  launch_pdl(ctx, pick_kernel<2>, grid, block, 0, a);
  launch_pdl(ctx, pick_kernel<3>, grid, block, 0, a);
  launch_pdl(ctx, pick_kernel<4>, grid, block, 0, a);
  launch_pdl(ctx, pick_kernel<5>, grid, block, 0, a);
  launch_pdl(ctx, pick_kernel<6>, grid, block, 0, a);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace

void pick_token_init(const Ctx& ctx) { scratch_for(ctx); }

void pick_token(Ctx& ctx, int32_t* out, const Ten& logits, const PickDyn* dyn, bool greedy_only) {
  Args a{};
  a.x = static_cast<const float*>(logits.p);
  a.dyn = dyn;
  a.out = out;
  a.s = scratch_for(ctx);
  launch_picks(ctx, a, logits.numel(), 1, greedy_only);
}

void* pick_rows_scratch(const Ctx& ctx, int64_t rows) { return row_scratch_for(ctx, rows); }

void pick_tokens(Ctx& ctx, int32_t* out, const Ten& logits, const PickDyn* dyn, bool greedy_only,
                 void* scratch) {
  const int64_t rows = logits.d[0];
  if (rows < 1) return;
  Args a{};
  a.x = static_cast<const float*>(logits.p);
  a.row_stride = logits.d[1];
  a.dyn = dyn;
  a.out = out;
  a.s = static_cast<Scratch*>(scratch);
  launch_picks(ctx, a, logits.d[1], rows, greedy_only);
}

}  // namespace hearth::cuda
