// Picking the next token on the GPU (Backend::pick_token), so a decode step sends the host one
// int32 instead of the whole logits row. One block of 1024 threads over the row (f32, in L2
// after the head GEMV wrote it):
// - greedy: argmax, ties to the lowest id, exactly as the host;
// - sampling: the host's chain (temperature, top-k, top-p, min-p, draw) without sorting. Each
//   truncation is a threshold on the scaled logit found by radix selection over its orderable
//   bits (8 bits per pass, 4 passes): top-k counts tokens, top-p sums probability mass. Each
//   warp fills its own histogram (a shared bin for the whole block serialises every thread:
//   most logits share their top bits). Masses are fixed-point integers (2^18 = probability of
//   the top token; a token below 2^-18 of it weighs nothing), so sums do not depend on the
//   order of atomic adds and a seeded run repeats exactly. Tokens tied at a threshold are
//   admitted in a fixed order (thread, then stride), where the host admits lower ids first —
//   the only difference, and only for exactly equal logits.
// Settings and the random draw are read from device memory, so a captured decode graph
// serves every request.
#include <cfloat>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr float kFixedOne =
    262144.0f;  // 2^18: a warp's bin of ≤ 2^14 tokens (vocab ≤ 512k) fits 32 bits

// Larger float → larger key; -inf and NaN are filtered before keys are used.
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Shared {
  uint32_t warp_bins[kThreads / 32][256];
  unsigned long long bins[256];
  unsigned long long scan[kThreads / 32];
  uint32_t prefix, mask;
  unsigned long long remaining;
  float best_v;
  int best_i;
};

// Exclusive prefix sum over the block (thread order); *total gets the sum.
__device__ unsigned long long block_scan(unsigned long long v, Shared& sh,
                                         unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) sh.scan[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = lane < kThreads / 32 ? sh.scan[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    if (lane < kThreads / 32) sh.scan[lane] = w;  // inclusive per warp
  }
  __syncthreads();
  const unsigned long long before = warp > 0 ? sh.scan[warp - 1] : 0;
  *total = sh.scan[kThreads / 32 - 1];
  return before + incl - v;
}

__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& sh) {
  unsigned long long total;
  block_scan(v, sh, &total);
  return total;
}

// A threshold found by radix selection: tokens with key > key_hi pass; of those with key ==
// key_hi the first `ties` (in thread/stride order) pass too.
struct Cut {
  uint32_t key = 0;
  unsigned long long ties = ~0ull;
  bool on = false;
};

struct Row {
  const float* logits;
  int n;
  float inv_t;
  __device__ bool valid(float l) const { return l > -INFINITY; }  // NaN fails too
};

// The survivors of the cuts so far, visited in thread/stride order with tie ranks.
struct Walker {
  const Cut* cuts;
  int n_cuts;
  unsigned long long tie_base[2];
  unsigned long long tie_seen[2];
  __device__ bool pass(uint32_t key) {
    for (int c = 0; c < n_cuts; ++c) {
      if (!cuts[c].on) continue;
      if (key < cuts[c].key) return false;
      if (key == cuts[c].key) {
        const unsigned long long rank = tie_base[c] + tie_seen[c]++;
        if (rank >= cuts[c].ties) return false;
      }
    }
    return true;
  }
};

__device__ __forceinline__ uint32_t fixed_mass(float v, float m) {
  return __float2uint_rn(__expf(v - m) * kFixedOne);
}

// Radix-selects over survivors of `prior` cuts: by count (mass = false) the k-th largest key,
// by probability mass (mass = true) the key where the cumulative mass reaches `target`.
__device__ Cut radix_cut(const Row& row, float m, const Cut* prior, int n_prior,
                         const unsigned long long* prior_tie_base, unsigned long long target,
                         bool mass, Shared& sh) {
  if (threadIdx.x == 0) {
    sh.prefix = 0;
    sh.mask = 0;
    sh.remaining = target;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256 * kThreads / 32; b += kThreads) (&sh.warp_bins[0][0])[b] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix, mask = sh.mask;
    Walker w{prior, n_prior, {prior_tie_base[0], prior_tie_base[1]}, {0, 0}};
    for (int i = threadIdx.x; i < row.n; i += kThreads) {
      const float l = row.logits[i];
      if (!row.valid(l)) continue;
      const float v = l * row.inv_t;
      const uint32_t key = key_of(v);
      if (!w.pass(key) || (key & mask) != prefix) continue;
      atomicAdd(&sh.warp_bins[threadIdx.x >> 5][(key >> shift) & 255u],
                mass ? fixed_mass(v, m) : 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      unsigned long long t = 0;
      for (int w = 0; w < kThreads / 32; ++w) t += sh.warp_bins[w][b];
      sh.bins[b] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long rem = sh.remaining;
      int digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (sh.bins[b] >= rem || b == 0) {
          digit = b;
          break;
        }
        rem -= sh.bins[b];
      }
      sh.prefix |= uint32_t(digit) << shift;
      sh.mask |= 255u << shift;
      sh.remaining = rem;
    }
    __syncthreads();
  }
  Cut c;
  c.on = true;
  c.key = sh.prefix;
  const unsigned long long rem = sh.remaining;
  __syncthreads();
  // Ties at the threshold: by count, `rem` of them; by mass, enough of them (each has the same
  // mass) to reach `rem`.
  if (!mass) {
    c.ties = rem;
  } else {
    const float v = __uint_as_float((c.key & 0x80000000u) ? (c.key & 0x7fffffffu) : ~c.key);
    const unsigned long long each = max(1u, fixed_mass(v, m));
    c.ties = (rem + each - 1) / each;
  }
  return c;
}

// Tie ranks: how many ties at cut.key precede this thread (thread/stride order), among the
// survivors of the earlier cuts.
__device__ unsigned long long tie_base_for(const Row& row, const Cut& cut, const Cut* prior,
                                           int n_prior, const unsigned long long* prior_tie_base,
                                           Shared& sh) {
  unsigned long long mine = 0;
  Walker w{prior, n_prior, {prior_tie_base[0], prior_tie_base[1]}, {0, 0}};
  for (int i = threadIdx.x; i < row.n; i += kThreads) {
    const float l = row.logits[i];
    if (!row.valid(l)) continue;
    const uint32_t key = key_of(l * row.inv_t);
    if (w.pass(key) && key == cut.key) ++mine;
  }
  unsigned long long total;
  return block_scan(mine, sh, &total);
}

// This thread's share (thread/stride order) of the probability mass of the tokens that pass
// the cuts and have a scaled logit ≥ floor_v.
__device__ unsigned long long survivor_mass(const Row& row, float m, const Cut* cuts, int n_cuts,
                                            const unsigned long long* tie_base, float floor_v) {
  unsigned long long mass = 0;
  Walker w{cuts, n_cuts, {tie_base[0], tie_base[1]}, {0, 0}};
  for (int i = threadIdx.x; i < row.n; i += kThreads) {
    const float l = row.logits[i];
    if (!row.valid(l)) continue;
    const float v = l * row.inv_t;
    if (w.pass(key_of(v)) && v >= floor_v) mass += fixed_mass(v, m);
  }
  return mass;
}

__global__ void __launch_bounds__(kThreads)
    pick_kernel(const float* logits, int n, const PickDyn* dyn, int32_t* out) {
  __shared__ Shared sh;
  pdl_wait();
  const PickDyn p = *dyn;
  const int tid = threadIdx.x;

  // Greedy, and the maximum for sampling: (value, lowest index).
  const float inv_t = p.temperature > 0.0f ? 1.0f / p.temperature : 1.0f;
  float best_v = -INFINITY;
  int best_i = n;
  for (int i = tid; i < n; i += kThreads) {  // increasing i: '>' keeps the lowest id
    const float v = p.temperature > 0.0f ? logits[i] * inv_t : logits[i];
    if (v > best_v || best_i == n) {
      best_v = v;
      best_i = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ov > best_v || (ov == best_v && oi < best_i)) {
      best_v = ov;
      best_i = oi;
    }
  }
  __shared__ float wv[kThreads / 32];
  __shared__ int wi[kThreads / 32];
  if ((tid & 31) == 0) {
    wv[tid >> 5] = best_v;
    wi[tid >> 5] = best_i;
  }
  __syncthreads();
  if (tid == 0) {
    float v = wv[0];
    int idx = wi[0];
    for (int w = 1; w < kThreads / 32; ++w)
      if (wv[w] > v || (wv[w] == v && wi[w] < idx)) {
        v = wv[w];
        idx = wi[w];
      }
    sh.best_v = v;
    sh.best_i = idx < n ? idx : 0;
  }
  __syncthreads();
  const float m = sh.best_v;
  const int argmax = sh.best_i;
  if (p.temperature <= 0.0f || !(m > -INFINITY)) {
    if (tid == 0) *out = argmax;
    return;
  }

  const Row row{logits, n, inv_t};
  Cut cuts[2];
  unsigned long long tie_base[2] = {0, 0};
  int n_cuts = 0;
  // top-k: a count threshold.
  if (p.top_k > 0) {
    unsigned long long valid = 0;
    for (int i = tid; i < n; i += kThreads) valid += row.valid(logits[i]) ? 1 : 0;
    valid = block_sum_u64(valid, sh);
    if (static_cast<unsigned long long>(p.top_k) < valid) {
      cuts[0] =
          radix_cut(row, m, cuts, 0, tie_base, static_cast<unsigned long long>(p.top_k), false, sh);
      tie_base[0] = tie_base_for(row, cuts[0], cuts, 0, tie_base, sh);
      n_cuts = 1;
    }
  }
  // top-p: a mass threshold over the top-k survivors.
  if (p.top_p < 1.0f) {
    const unsigned long long mass =
        block_sum_u64(survivor_mass(row, m, cuts, n_cuts, tie_base, -INFINITY), sh);
    const double t = double(p.top_p) * double(mass);
    const unsigned long long target = max(1ull, (unsigned long long)(t));
    cuts[n_cuts] = radix_cut(row, m, cuts, n_cuts, tie_base, target, true, sh);
    tie_base[n_cuts] = tie_base_for(row, cuts[n_cuts], cuts, n_cuts, tie_base, sh);
    ++n_cuts;
  }
  // min-p keeps p ≥ min_p · p_max, i.e. v ≥ m + ln(min_p); then the draw.
  const float floor_v = p.min_p > 0.0f ? m + logf(p.min_p) : -INFINITY;
  const unsigned long long mine = survivor_mass(row, m, cuts, n_cuts, tie_base, floor_v);
  unsigned long long total;
  const unsigned long long before = block_scan(mine, sh, &total);
  const unsigned long long r = (unsigned long long)(p.u * double(total));
  if (tid == 0) sh.best_i = argmax;
  __syncthreads();
  if (mine > 0 && r >= before && r < before + mine) {
    unsigned long long acc = before;
    Walker w{cuts, n_cuts, {tie_base[0], tie_base[1]}, {0, 0}};
    for (int i = tid; i < n; i += kThreads) {
      const float l = logits[i];
      if (!row.valid(l)) continue;
      const float v = l * inv_t;
      if (!w.pass(key_of(v)) || v < floor_v) continue;
      acc += fixed_mass(v, m);
      if (r < acc) {
        sh.best_i = i;
        break;
      }
    }
  }
  __syncthreads();
  if (tid == 0) *out = sh.best_i;
}

}  // namespace

void pick_token(Ctx& ctx, int32_t* out, const Ten& logits, const PickDyn* dyn) {
  launch_pdl(ctx, pick_kernel, dim3(1), dim3(kThreads), 0, static_cast<const float*>(logits.p),
             int(logits.numel()), dyn, out);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
