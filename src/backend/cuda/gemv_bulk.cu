// Decode products of one activation row whose weights arrive by bulk copy (sm_90's copy engine,
// cp.async.bulk) instead of register loads: the same products as gemv_kernel (gemv.cu; plain,
// GLU, input norm, residual add, several matrices per launch), for the case batch-1 decode
// spends its time in.
//
// Why: bench_cuda_stream measured a chain of plain streaming kernels of the 8B's layer shapes
// at 4.33 TB/s, while the register-loading GEMVs deliver ~3.4 TB/s in the decode graph and the
// head, a single 1–2 GB product, 4.1 TB/s. Register loads tie the bytes in flight to registers
// and warps (the GLU variant runs 16 warps per SM) and, under programmatic launch, only a first
// batch can be requested before the wait on the previous kernel. Bulk copies put up to ~190 KB
// per SM in flight with one thread, and a block requests its first stages (its own weights,
// which no kernel writes) before that wait.
//
// Status: off by default (HEARTH_GEMV_BULK=1 turns it on). Right on the H200 (the CUDA op
// tests and the GPU model fixtures pass through it) but slower there (session 8, tg128): 9B
// hybrid 208–209 → 118–121 t/s (145 with HEARTH_GEMV_BULK_KB=64, three blocks per SM), 0.6B
// 1,058–1,077 → 719–808, 8B per-op 218 → 120. Not diagnosed; one block of 8 warps per SM that
// refills a stage only after a block-wide barrier is the first suspect (docs/cuda.md lists
// what to try: a producer warp, per-warp rings, more consumer warps).
//
// Work split: block b owns the contiguous rows [T·b/grid, T·(b+1)/grid) of all T rows (the
// segments' rows in order), so every block streams the same bytes to within one row. They go
// through a ring of `slots` stages of G rows (G · row bytes, twice for GLU: gate rows then up
// rows), one mbarrier per stage; thread 0 refills a stage when the block has consumed it. A
// stage's rows go to the warps: for G ≥ 8 a warp per row, else W = 8/G warps per row, each a
// contiguous 1/W of its columns, partial sums meeting in shared memory. x (normalised for the
// NORM variant, with norm.cu's arithmetic) sits in shared memory beside the stages.
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cuda/gemv_args.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = kGemvWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxSlots = 8;
constexpr size_t kMaxSmem = 226 * 1024;  // sm_90: 227 KB per block, less the static arrays

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that also announces `bytes` of bulk copies to come (the phase completes when
// they have all landed).
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
#endif

template <bool GLU, bool NORM>
__global__ void __launch_bounds__(kThreads)
    gemv_bulk_kernel(const GemvArgs a, int64_t total_rows, int G, int slots, int stage_bytes,
                     uint32_t chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float part[kWarps][2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t in8 = a.in8;
  const uint32_t row_bytes = uint32_t(in8 * 16);
  uint4* const xs = reinterpret_cast<uint4*>(smem + size_t(slots) * stage_bytes);
  uint64_t* const full =
      reinterpret_cast<uint64_t*>(smem + size_t(slots) * stage_bytes + row_bytes);
  const int64_t r_begin = total_rows * blockIdx.x / gridDim.x;
  const int64_t r_end = total_rows * (blockIdx.x + 1) / gridDim.x;
  const int n_stages = int((r_end - r_begin + G - 1) / G);

  pdl_trigger();
  if (tid == 0) {
    for (int i = 0; i < slots; ++i) mbar_init(&full[i]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Thread 0: stage `it`'s rows into its slot, runs of rows of one segment in one copy each.
  auto issue = [&](int it) {
    unsigned char* dst = smem + size_t(it % slots) * stage_bytes;
    uint64_t* bar = &full[it % slots];
    const int64_t r0 = r_begin + int64_t(it) * G;
    const int rows = int(min(int64_t(G), r_end - r0));
    mbar_expect(bar, uint32_t(rows) * row_bytes * (GLU ? 2 : 1));
    for (int i = 0; i < rows;) {
      const GemvSeg& g = a.seg[seg_of(a, r0 + i)];
      const int64_t local = r0 + i - g.first_block;
      const int run = int(min(int64_t(rows - i), g.rows - local));
      const uint32_t bytes = uint32_t(run) * row_bytes;
      for (uint32_t off = 0; off < bytes; off += chunk) {
        const uint32_t n = min(chunk, bytes - off);
        bulk_copy(dst + size_t(i) * row_bytes + off,
                  reinterpret_cast<const char*>(g.w + local * in8) + off, n, bar);
        if constexpr (GLU)
          bulk_copy(dst + size_t(G + i) * row_bytes + off,
                    reinterpret_cast<const char*>(g.w2 + local * in8) + off, n, bar);
      }
      i += run;
    }
  };
  // The first stages are requested before the wait: weights are never written.
  if (tid == 0)
    for (int it = 0; it < slots && it < n_stages; ++it) issue(it);
  pdl_wait();

  if constexpr (NORM) {
    normalise_input(a, 1, xs);
  } else {
    for (int64_t i = tid; i < in8; i += kThreads) xs[i] = a.x[i];
  }
  __syncthreads();

  const int W = G >= kWarps ? 1 : kWarps / G;  // warps per row
  const int piece = warp % W;
  const int64_t len = (in8 + W - 1) / W;
  const int64_t c_lo = piece * len, c_hi = min(in8, c_lo + len);
  for (int it = 0; it < n_stages; ++it) {
    const int slot = it % slots;
    mbar_wait(&full[slot], uint32_t(it / slots) & 1u);
    const unsigned char* stage = smem + size_t(slot) * stage_bytes;
    const int64_t r0 = r_begin + int64_t(it) * G;
    const int rows = int(min(int64_t(G), r_end - r0));
    // Rows of this stage for this warp: i = warp/W, then +kWarps (G ≥ 8 only).
    for (int i = warp / W; i < G; i += kWarps / W) {
      float acc = 0.0f, acc2 = 0.0f;
      if (i < rows) {
        const uint4* wr = reinterpret_cast<const uint4*>(stage + size_t(i) * row_bytes);
        const uint4* ur = reinterpret_cast<const uint4*>(stage + size_t(G + i) * row_bytes);
#pragma unroll 4
        for (int64_t c = c_lo + lane; c < c_hi; c += 32) {
          const uint4 xv = xs[c];
          acc += dot8(wr[c], xv);
          if constexpr (GLU) acc2 += dot8(ur[c], xv);
        }
      }
      acc = warp_sum(acc);
      if constexpr (GLU) acc2 = warp_sum(acc2);
      if (W > 1) {  // uniform: G < 8, one row per warp
        if (lane == 0) {
          part[warp][0] = acc;
          part[warp][1] = acc2;
        }
        __syncthreads();
        if (piece == 0)
          for (int p = 1; p < W; ++p) {
            acc += part[warp + p][0];
            acc2 += part[warp + p][1];
          }
      }
      if (i < rows && piece == 0 && lane == 0) {
        const GemvSeg& g = a.seg[seg_of(a, r0 + i)];
        store_row<GLU>(g, a.act, 0, r0 + i - g.first_block, acc, acc2);
      }
    }
    __syncthreads();  // the stage is consumed (and part[] free): refill it
    if (tid == 0 && it + slots < n_stages) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(it + slots);
    }
  }
#else
  __trap();  // launched on sm_90+ only (gemv_bulk checks ctx.pdl)
#endif
}

// Shared memory per block (KB) the stages and x may take; HEARTH_GEMV_BULK_KB, for measurements.
// The least of the four kernels' shared memory limits (gemv_bulk_init).
size_t g_allowed = 0;
size_t smem_budget() {
  static const size_t b = [] {
    const char* e = std::getenv("HEARTH_GEMV_BULK_KB");
    const long v = e ? std::atol(e) : 0;
    return v > 0 ? std::min(size_t(v) * 1024, kMaxSmem) : size_t(200) * 1024;
  }();
  return std::min(b, g_allowed);
}

// The largest single bulk copy (HEARTH_GEMV_BULK_CHUNK_KB, for measurements; default: a whole
// run of rows in one copy).
uint32_t copy_chunk() {
  static const uint32_t c = [] {
    const char* e = std::getenv("HEARTH_GEMV_BULK_CHUNK_KB");
    const long v = e ? std::atol(e) : 0;
    return v > 0 ? uint32_t(v) * 1024u : uint32_t(1) << 30;
  }();
  return c;
}

template <bool GLU, bool NORM>
void allow_smem() {
  const size_t allowed =
      allow_dynamic_smem(reinterpret_cast<const void*>(gemv_bulk_kernel<GLU, NORM>), kMaxSmem);
  g_allowed = g_allowed == 0 ? allowed : std::min(g_allowed, allowed);
}

}  // namespace

void gemv_bulk_init() {
  allow_smem<false, false>();
  allow_smem<false, true>();
  allow_smem<true, false>();
  allow_smem<true, true>();
}

bool gemv_bulk(Ctx& ctx, GemvArgs a, int64_t total_rows, bool glu) {
  if (!gemv_takes(GemvKernel::Bulk) || !ctx.pdl || total_rows < 1) return false;
  const size_t row_bytes = size_t(a.in8) * 16;
  const size_t per_row = row_bytes * (glu ? 2 : 1);
  const size_t fixed = row_bytes + kMaxSlots * 8;  // x, the mbarriers
  if (fixed >= smem_budget()) return false;
  const size_t avail = smem_budget() - fixed;
  // The most rows per stage (a power of two, at most 16) that still leaves three stages; two
  // stages of one row as the last resort.
  int G = 0, slots = 0;
  for (int g = 16; g >= 1 && G == 0; g /= 2)
    if (avail / (g * per_row) >= 3) {
      G = g;
      slots = int(std::min<size_t>(avail / (g * per_row), kMaxSlots));
    }
  if (G == 0 && avail / per_row >= 2) G = 1, slots = 2;
  if (G == 0) return false;
  int64_t first = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = first;
    first += a.seg[i].rows;
  }
  const int stage_bytes = int(G * per_row);
  const size_t smem = size_t(slots) * stage_bytes + fixed;
  const bool norm = a.norm_w != nullptr;
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const unsigned grid = unsigned(std::min(resident, total_rows));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kThreads), smem, a, total_rows, G, slots, stage_bytes,
               copy_chunk());
  };
  if (glu)
    norm ? go(gemv_bulk_kernel<true, true>) : go(gemv_bulk_kernel<true, false>);
  else
    norm ? go(gemv_bulk_kernel<false, true>) : go(gemv_bulk_kernel<false, false>);
  return true;
}

}  // namespace hearth::cuda
