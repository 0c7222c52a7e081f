// The trellis Viterbi encoder on the GPU (trellis_coder_cuda.h), step for step the search of
// src/quant/trellis_encode.cpp: costs are f32 ≥ 0 kept as bit patterns with the low k bits
// cleared; during the min over a state group's 2^k predecessors those bits carry the
// predecessor's index, so one unsigned min gives cost and argmin. Pass 1 codes the block
// rotated by 128 to find the wrap-around state's shared bits; pass 2 codes it with the start
// and end states restricted to them (tail-biting).
//
// One thread block per 256-weight block. A thread owns state groups j (the 2^k states
// j·2^k + b share their predecessors m·2^(12-k) + j) and keeps their code values in registers.
// Shared memory: two cost arrays (read one, write the other, one barrier per step), padded by a
// word every 32 so that both the strided writes (j·2^k + b) and the contiguous reads are free
// of bank conflicts; and the backpointers of all 256 steps, packed 2 (k = 2) or 4 bits per
// group (64 KB at most), which is what keeps them out of global memory.
#include "backend/cuda/packed_decode.cuh"

namespace hearth::cuda {

namespace {

constexpr int kT = kTrellisBlock;  // 256 steps
constexpr int kStates = 4096;      // L = 12
constexpr int kPaddedStates = kStates + kStates / 32;

__device__ __forceinline__ int padded(int n) { return n + (n >> 5); }

template <int K>
struct ViterbiShape {
  static constexpr int kGroups = kStates >> K;  // S: predecessor groups j
  static constexpr int kBranch = 1 << K;        // B: states per group, predecessors per state
  static constexpr uint32_t kLow = kBranch - 1;
  static constexpr int kThreads = kGroups < 512 ? kGroups : 512;
  static constexpr int kGroupsPerThread = kGroups / kThreads;
  static constexpr int kEntryBits = K == 2 ? 2 : 4;  // a backpointer's width in shared memory
  static constexpr int kEntriesPerWord = 32 / kEntryBits;
  static constexpr int kWordsPerStep = kGroups / kEntriesPerWord;
  static constexpr size_t kSmemBytes = sizeof(uint32_t) * (2 * kPaddedStates + kT * kWordsPerStep) +
                                       sizeof(float) * kT + kT /* symbols */ +
                                       sizeof(unsigned long long) * 32 /* reduction */;
};

struct Smem {
  uint32_t* cost;  // two arrays of kPaddedStates: cost + i·kPaddedStates, i = 0, 1
  uint32_t* bp;
  float* x;
  uint8_t* sym;
  unsigned long long* red;
};

template <int K>
__device__ Smem carve(unsigned char* base) {
  using V = ViterbiShape<K>;
  Smem s;
  auto* words = reinterpret_cast<uint32_t*>(base);
  s.cost = words;
  s.bp = words + 2 * kPaddedStates;
  s.x = reinterpret_cast<float*>(s.bp + kT * V::kWordsPerStep);
  s.red = reinterpret_cast<unsigned long long*>(s.x + kT);  // 8-byte aligned: offsets are even
  s.sym = reinterpret_cast<uint8_t*>(s.red + 32);
  return s;
}

// One forward pass over x[(t + shift) % 256]; returns which cost array holds the final costs.
// start_overlap >= 0 allows only the start states n with n >> K == start_overlap.
template <int K>
__device__ __forceinline__ int viterbi_forward(
    const Smem& s, const float (&code)[ViterbiShape<K>::kGroupsPerThread][ViterbiShape<K>::kBranch],
    int shift, int start_overlap) {
  using V = ViterbiShape<K>;
  const uint32_t forbidden = __float_as_uint(1e30f);
  {
    const float x0 = s.x[shift];
#pragma unroll
    for (int r = 0; r < V::kGroupsPerThread; ++r) {
      const int j = int(threadIdx.x) + r * V::kThreads;
#pragma unroll
      for (int b = 0; b < V::kBranch; ++b) {
        const float d = x0 - code[r][b];
        uint32_t c = __float_as_uint(d * d) & ~V::kLow;
        if (start_overlap >= 0 && j != start_overlap) c = forbidden;  // (j·B + b) >> K == j
        s.cost[padded(j * V::kBranch + b)] = c;
      }
    }
  }
  __syncthreads();
  int cur = 0;
  const int lane = int(threadIdx.x) & 31;
  const int slot = lane % V::kEntriesPerWord;
  for (int t = 1; t < kT; ++t) {
    const uint32_t* old_cost = s.cost + cur * kPaddedStates;
    uint32_t* new_cost = s.cost + (cur ^ 1) * kPaddedStates;
    const float xt = s.x[(t + shift) & (kT - 1)];
#pragma unroll
    for (int r = 0; r < V::kGroupsPerThread; ++r) {
      const int j = int(threadIdx.x) + r * V::kThreads;
      uint32_t best = old_cost[padded(j)];
#pragma unroll
      for (int m = 1; m < V::kBranch; ++m)
        best = min(best, old_cost[padded(m * V::kGroups + j)] | uint32_t(m));
      // Consecutive lanes hold consecutive j: OR their entries into one word per
      // kEntriesPerWord lanes.
      uint32_t packed = (best & V::kLow) << (slot * V::kEntryBits);
#pragma unroll
      for (int off = 1; off < V::kEntriesPerWord; off <<= 1)
        packed |= __shfl_xor_sync(0xffffffffu, packed, off);
      if (slot == 0) s.bp[t * V::kWordsPerStep + j / V::kEntriesPerWord] = packed;
      const float base = __uint_as_float(best & ~V::kLow);
#pragma unroll
      for (int b = 0; b < V::kBranch; ++b) {
        const float d = xt - code[r][b];
        new_cost[padded(j * V::kBranch + b)] = __float_as_uint(base + d * d) & ~V::kLow;
      }
    }
    __syncthreads();
    cur ^= 1;
  }
  return cur;
}

// The cheapest final state (the smallest index among equal costs, as the CPU's scan);
// end_overlap >= 0 allows only n with n % 2^(12-K) == end_overlap. Every thread gets it.
template <int K>
__device__ int best_end_state(const Smem& s, const uint32_t* cost, int end_overlap) {
  using V = ViterbiShape<K>;
  unsigned long long best = ~0ull;
  for (int n = int(threadIdx.x); n < kStates; n += V::kThreads) {
    if (end_overlap >= 0 && n % V::kGroups != end_overlap) continue;
    best = min(best, (static_cast<unsigned long long>(cost[padded(n)]) << 32) | uint32_t(n));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, off));
  const int warp = int(threadIdx.x) >> 5, warps = V::kThreads / 32;
  if ((threadIdx.x & 31) == 0) s.red[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w) best = min(best, s.red[w]);
    s.red[0] = best;
  }
  __syncthreads();
  const int n = int(s.red[0] & 0xffffffffu);
  __syncthreads();  // s.red is reused by the next call
  return n;
}

// The state at step t - 1 on the best path through state n at step t.
template <int K>
__device__ __forceinline__ int previous_state(const Smem& s, int t, int n) {
  using V = ViterbiShape<K>;
  const int j = n >> K;
  const uint32_t word = s.bp[t * V::kWordsPerStep + j / V::kEntriesPerWord];
  const int m = int(word >> ((j % V::kEntriesPerWord) * V::kEntryBits)) & int(V::kLow);
  return m * V::kGroups + j;
}

template <int K>
__global__ void __launch_bounds__(ViterbiShape<K>::kThreads, 2)
    trellis_viterbi_kernel(const float* __restrict__ x, uint32_t* __restrict__ words) {
  using V = ViterbiShape<K>;
  extern __shared__ __align__(16) unsigned char smem[];
  const Smem s = carve<K>(smem);
  const int64_t block = blockIdx.x;
  for (int t = int(threadIdx.x); t < kT; t += V::kThreads) s.x[t] = x[block * kT + t];
  float code[V::kGroupsPerThread][V::kBranch];
#pragma unroll
  for (int r = 0; r < V::kGroupsPerThread; ++r)
#pragma unroll
    for (int b = 0; b < V::kBranch; ++b) {
      const int n = (int(threadIdx.x) + r * V::kThreads) * V::kBranch + b;
      code[r][b] = trellis_1mad(uint32_t(n)) / kTrellis1madScale;  // IEEE division: the CPU table
    }
  __syncthreads();

  // Pass 1: rotated by T/2; the path's state where x[0] sits (step 128) fixes the overlap.
  int cur = viterbi_forward<K>(s, code, kT / 2, -1);
  int end = best_end_state<K>(s, s.cost + cur * kPaddedStates, -1);
  if (threadIdx.x == 0) {
    int n = end;
    for (int t = kT - 1; t > kT / 2; --t) n = previous_state<K>(s, t, n);
    s.red[0] = static_cast<unsigned long long>(n >> K);
  }
  __syncthreads();
  const int overlap = int(s.red[0]);
  __syncthreads();

  // Pass 2: the block itself, its path biting its tail.
  cur = viterbi_forward<K>(s, code, 0, overlap);
  end = best_end_state<K>(s, s.cost + cur * kPaddedStates, overlap);
  if (threadIdx.x == 0) {
    int n = end;
    s.sym[kT - 1] = uint8_t(n & int(V::kLow));
    for (int t = kT - 1; t > 0; --t) {
      n = previous_state<K>(s, t, n);
      s.sym[t - 1] = uint8_t(n & int(V::kLow));
    }
  }
  __syncthreads();
  // Symbol t sits at bits [(255 - t)·K, +K), least significant bit first (trellis.h).
  constexpr int kBlockWords = kT * K / 32;
  for (int w = int(threadIdx.x); w < kBlockWords; w += V::kThreads) {
    uint32_t word = 0;
#pragma unroll
    for (int p = 0; p < 32; ++p) {
      const int pos = w * 32 + p;
      word |= uint32_t((s.sym[kT - 1 - pos / K] >> (pos % K)) & 1) << p;
    }
    words[block * kBlockWords + w] = word;
  }
}

template <int K>
void launch_viterbi(const float* x, int64_t n, uint32_t* words, cudaStream_t stream) {
  using V = ViterbiShape<K>;
  // Per launch (a cheap host call): the attribute belongs to the current device.
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(
      trellis_viterbi_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(V::kSmemBytes)));
  trellis_viterbi_kernel<K><<<unsigned(n), V::kThreads, V::kSmemBytes, stream>>>(x, words);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace

void launch_trellis_viterbi(const float* x, int64_t n, int k, uint32_t* words,
                            cudaStream_t stream) {
  if (n <= 0) return;
  if (k == 2) launch_viterbi<2>(x, n, words, stream);
  if (k == 3) launch_viterbi<3>(x, n, words, stream);
  if (k == 4) launch_viterbi<4>(x, n, words, stream);
}

}  // namespace hearth::cuda
