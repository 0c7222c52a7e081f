// The ceiling for batch-1 decode on this GPU: how fast can a chain of weight matrices be read
// when every matrix must wait for the one before it (as each decode GEMV waits for its input)?
// No arithmetic, no activations: each matrix is only streamed (16-byte non-caching loads, four
// in flight per thread, a grid-stride walk, so every block gets the same bytes). For the layer
// shapes of the decode figures in docs/PERFORMANCE.md (Qwen3-0.6B, Qwen3-8B, the Qwen3.5-9B
// hybrid's linear-attention layer), repeated over the model's layers in distinct memory:
//   flat      one kernel reading all the layers' bytes: the streaming ceiling
//   launches  a kernel per matrix, captured in a graph, plain stream order
//   pdl       a kernel per matrix with programmatic dependent launch (first loads issued
//             before griddepcontrol.wait), as hearth's decode GEMVs run
//   barrier   one persistent kernel, a grid barrier (release add, acquire polling) per matrix,
//             as hearth's one-kernel decode step runs; "barrier-a" arrives before issuing the
//             next matrix's first loads instead of after
//   loader    one persistent kernel with the same barriers, in which a loader warp per block
//             streams every matrix's share into a shared-memory ring (bulk copies) without
//             waiting for them, so the loads run up to the ring's size ahead of the barrier
//             the consumers wait at: what a decode megakernel whose weight loads run ahead of
//             its dependencies could reach (sm_90); "loader+dot" computes the products from
//             the ring as a decode GEMV would (input vector read after each barrier, outputs
//             stored), "loader+dot4" with four words per lane in flight; for splitting its
//             cost, "loader+dep" only reads the input and stores outputs (the dependency alone)
//             and "loader+dotr" computes with x held in a register (the arithmetic without x's
//             reads); docs/PERFORMANCE.md
//   hearth    hearth's own decode GEMVs (gemv.cu) over the same matrices: four launches per
//             layer with the input norm, GLU and residual adds
// Also device-to-device cudaMemcpy (the 4.3 TB/s of the issue counts read + write bytes), and a
// grid barrier's latency alone at one block per SM and at the barrier rows' grid.
// Usage: bench_cuda_stream [reps] [gemv]   ("gemv": only the hearth row, e.g. to compare two
// builds of gemv.cu run by run; built only with CUDA; CUDA events; median of reps)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/device_util.cuh"

using hearth::cuda::ld_stream;

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

// Streams words [0, n) of `p` with the whole grid; `wait` runs after the first loads are issued.
template <typename Wait>
__device__ uint32_t stream(const uint4* p, size_t n, Wait wait) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t acc = 0;
  uint4 v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    v[u] = i + u * stride < n ? ld_stream(p + i + u * stride) : make_uint4(0, 0, 0, 0);
  wait();
  for (;;) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    i += kUnroll * stride;
    if (i >= n) break;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      v[u] = i + u * stride < n ? ld_stream(p + i + u * stride) : make_uint4(0, 0, 0, 0);
  }
  return acc;
}

// Keeps the loads alive: the xor of everything read is almost never this value.
__device__ void keep(uint32_t acc, uint32_t* sink) {
  if (acc == 0x9e3779b9u) *sink = acc;
}

template <bool kPdl>
__global__ void __launch_bounds__(kThreads) read_kernel(const uint4* p, size_t n, uint32_t* sink) {
  if (kPdl) hearth::cuda::pdl_trigger();
  keep(stream(p, n,
              [] {
                if (kPdl) hearth::cuda::pdl_wait();
              }),
       sink);
}

struct Chain {
  const uint4* const* p;  // device array of matrix starts
  const size_t* n;        // their lengths in 16-byte words
  const int* in8;         // their row lengths in 16-byte words
  int count;
};

// A grid barrier in two halves (one thread of a block): arrive once the block is done with a
// matrix (release: its writes are visible to whoever sees the count), then wait until `target`
// arrivals (acquire).
__device__ __forceinline__ void grid_arrive(unsigned long long* count) {
  asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(count) : "memory");
}
__device__ __forceinline__ void grid_wait_for(unsigned long long* count,
                                              unsigned long long target) {
  unsigned long long seen = 0;
  do {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(count) : "memory");
  } while (seen < target);
}

// All matrices in one kernel, a grid barrier before each but the first. The barrier count only
// grows (reset before each launch), so phase k waits until k · gridDim arrivals. The block
// arrives after issuing the next matrix's first loads, or with kArriveFirst before them (a
// release may have to wait for the arriving thread's loads in flight).
template <bool kArriveFirst>
__global__ void __launch_bounds__(kThreads)
    barrier_kernel(Chain c, unsigned long long* count, uint32_t* sink) {
  uint32_t acc = 0;
  for (int k = 0; k < c.count; ++k) {
    if (kArriveFirst && k > 0) {
      __syncthreads();
      if (threadIdx.x == 0) grid_arrive(count);
    }
    acc ^= stream(c.p[k], c.n[k], [&] {
      if (k == 0) return;
      if (!kArriveFirst) __syncthreads();
      if (threadIdx.x == 0) {
        if (!kArriveFirst) grid_arrive(count);
        grid_wait_for(count, (unsigned long long)k * gridDim.x);
      }
      __syncthreads();
    });
  }
  keep(acc, sink);
}

// Grid barriers and nothing else: what one costs with no loads in flight and no imbalance.
__global__ void barriers_only_kernel(int n, unsigned long long* count) {
  for (int k = 1; k <= n; ++k) {
    __syncthreads();
    if (threadIdx.x == 0) {
      grid_arrive(count);
      grid_wait_for(count, (unsigned long long)k * gridDim.x);
    }
    __syncthreads();
  }
}

// The loader kernels: warp 0 of each block copies the block's chunks of every matrix in turn
// (chunk j of a matrix to block j mod grid; a chunk is whole rows, about 16 KB) into a ring of
// kSlots slots, each guarded by a "full" mbarrier (the copy landed) and an "empty" one (a
// consumer is done with it). Consumer warps take the block's chunks round-robin, and before the
// chunks of matrix k wait at a grid barrier for every block to have consumed matrix k - 1; the
// loader never waits there. kDot: the consumers compute the chunk's rows · x as a decode GEMV
// does (x, the matrix's input, read from global memory into shared memory after the barrier,
// as a product's input made by the phase before would be; y stored), else they only fold the
// words together.
constexpr int kConsumers = 8;
constexpr int kLoaderThreads = (kConsumers + 1) * 32;
constexpr uint32_t kSlotBytes = 24 * 1024;  // a row of 12288 bf16 fits
constexpr int kSlots = 8;                   // 192 KB of ring per block, one block per SM
constexpr size_t kRingBytes = size_t(kSlots) * kSlotBytes;
constexpr int kMaxIn8 = 1536;  // x in shared memory: rows of up to 12288 bf16

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
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
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// Matrix k's chunking: rows of in8[k] words, rows_per_chunk of them per chunk.
struct Chunking {
  size_t row_words, rows_per_chunk, chunk_words, chunks;
  __device__ Chunking(const Chain& c, int k)
      : row_words(size_t(c.in8[k])),
        rows_per_chunk(max(size_t(1), size_t(16 * 1024 / 16) / row_words)),
        chunk_words(rows_per_chunk * row_words),
        chunks((c.n[k] + chunk_words - 1) / chunk_words) {}
  __device__ uint32_t words(const Chain& c, int k, size_t j) const {
    return uint32_t(min(chunk_words, c.n[k] - j * chunk_words));
  }
};

#endif

// kDot: 0 fold the words, 1 a plain dot loop, 2 four loads per lane in flight; for measurement
// only, 3 fold the words but read x and store y as the products do (the dependency alone), 4 as
// 2 with one word of x held in a register for every column (the products without x's reads).
template <int kDot>
__global__ void __launch_bounds__(kLoaderThreads, 1)
    loader_kernel(Chain c, const uint4* x, float* y, unsigned long long* count, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  uint4* const xs = reinterpret_cast<uint4*>(ring + kRingBytes);  // kDot: [kMaxIn8]
  __shared__ uint64_t full[kSlots], empty[kSlots];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t G = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(&full[s]);
      mbar_init(&empty[s]);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {  // the loader: one thread issues every copy
    if (lane != 0) return;
    uint32_t n = 0;  // the block's chunks so far, over all matrices
    for (int k = 0; k < c.count; ++k) {
      const Chunking ch(c, k);
      for (size_t j = blockIdx.x; j < ch.chunks; j += G, ++n) {
        const int s = int(n % kSlots);
        const uint32_t use = n / kSlots;
        if (use > 0) {
          mbar_wait(&empty[s], (use - 1) & 1);
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }
        const uint32_t bytes = ch.words(c, k, j) * 16;
        mbar_expect(&full[s], bytes);
        bulk_copy(ring + size_t(s) * kSlotBytes, c.p[k] + j * ch.chunk_words, bytes, &full[s]);
      }
    }
    return;
  }
  const int w = warp - 1;
  const int ctid = int(threadIdx.x) - 32;  // among the consumers
  uint32_t acc = 0, n = 0;
  for (int k = 0; k < c.count; ++k) {
    const Chunking ch(c, k);
    if (k > 0) {  // named barrier 1: the consumer warps only (the loader has left or runs on)
      asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * 32) : "memory");
      if (ctid == 0) {
        grid_arrive(count);
        grid_wait_for(count, (unsigned long long)k * G);
      }
      asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * 32) : "memory");
    }
    if (kDot) {  // this matrix's input, written (in a real step) before the barrier
      for (size_t i = ctid; i < ch.row_words; i += kConsumers * 32) xs[i] = __ldcg(x + i);
      asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * 32) : "memory");
    }
    const uint4 xr = kDot == 4 ? xs[lane] : make_uint4(0, 0, 0, 0);
    for (size_t j = blockIdx.x, i = 0; j < ch.chunks; j += G, ++n, ++i) {
      if (int(i % kConsumers) != w) continue;
      const int s = int(n % kSlots);
      mbar_wait(&full[s], (n / kSlots) & 1);
      const uint4* q = reinterpret_cast<const uint4*>(ring + size_t(s) * kSlotBytes);
      const uint32_t words = ch.words(c, k, j);
      if (kDot == 1) {
        for (uint32_t r = 0; r * ch.row_words < words; ++r) {
          float dot = 0.0f;
          for (size_t col = lane; col < ch.row_words; col += 32)
            dot += hearth::cuda::dot8(q[r * ch.row_words + col], xs[col]);
          dot = hearth::cuda::warp_sum(dot);
          if (lane == 0) y[j * ch.rows_per_chunk + r] = dot;
        }
      } else if (kDot == 2 || kDot == 4) {  // four words per lane in flight, four sums
        const uint32_t row = uint32_t(ch.row_words);
        for (uint32_t r = 0; r * row < words; ++r) {
          const uint4* qr = q + r * row;
          float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          uint32_t col = lane;
          for (; col + 96 < row; col += 128) {
            uint4 w[4], v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              w[u] = qr[col + 32 * u];
              v[u] = kDot == 2 ? xs[col + 32 * u] : xr;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) a[u] += hearth::cuda::dot8(w[u], v[u]);
          }
          for (; col < row; col += 32)
            a[0] += hearth::cuda::dot8(qr[col], kDot == 2 ? xs[col] : xr);
          const float dot = hearth::cuda::warp_sum((a[0] + a[1]) + (a[2] + a[3]));
          if (lane == 0) y[j * ch.rows_per_chunk + r] = dot;
        }
      } else {
        for (uint32_t v = lane; v < words; v += 32) acc ^= q[v].x ^ q[v].y ^ q[v].z ^ q[v].w;
        if (kDot == 3 && lane == 0)
          for (uint32_t r = 0; r * ch.row_words < words; ++r)
            y[j * ch.rows_per_chunk + r] = __uint_as_float(acc);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
  }
  keep(acc, sink);
#else
  __trap();  // launched on sm_90+ only
#endif
}

template <typename Body>
float time_ms(cudaStream_t s, int reps, const Body& body) {
  cudaEvent_t a, b;
  HEARTH_CUDA_CHECK(cudaEventCreate(&a));
  HEARTH_CUDA_CHECK(cudaEventCreate(&b));
  body();  // warm-up
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    HEARTH_CUDA_CHECK(cudaEventRecord(a, s));
    body();
    HEARTH_CUDA_CHECK(cudaEventRecord(b, s));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

// A decode layer's products: the normalised input projection (segments of rows), the output
// projection (H rows of o_in) with the residual add, gate/up (2 × I rows of H) with the norm and
// GLU, down (H rows of I) with the residual add.
struct Model {
  const char* name;
  int layers;
  int64_t H, I, o_in;
  std::vector<int64_t> in_rows;
  // The layer's matrices in streaming order, MB (10^6 bytes).
  std::vector<double> mb() const {
    int64_t in = 0;
    for (int64_t r : in_rows) in += r;
    return {in * H * 2e-6, H * o_in * 2e-6, 2 * I * H * 2e-6, H * I * 2e-6};
  }
  // Their row lengths, in 16-byte words.
  std::vector<int> in8() const { return {int(H / 8), int(o_in / 8), int(H / 8), int(I / 8)}; }
};

// hearth's own decode GEMVs (gemv.cu) over the same layers, as the decode graph runs them: a graph
// of four launches per layer with programmatic launch (gemv_init has run). Weights are a constant
// fill (the kernels' speed does not depend on the values).
float gemv_chain_ms(cudaStream_t s, int sms, int reps, const Model& m) {
  using namespace hearth::cuda;
  Ctx ctx;
  ctx.stream = s;
  ctx.sm_count = sms;
  ctx.pdl = true;
  auto bf16 = [](void* p, std::initializer_list<int64_t> dims) {
    Ten t;
    t.p = p;
    t.dtype = kBF16;
    t.ndim = int32_t(dims.size());
    int i = 0;
    for (int64_t d : dims) t.d[i++] = d;
    return t;
  };
  std::vector<void*> owned;
  auto dev = [&](int64_t elems) {
    void* p = nullptr;
    HEARTH_CUDA_CHECK(cudaMalloc(&p, size_t(elems) * 2));
    HEARTH_CUDA_CHECK(cudaMemsetAsync(p, 0x3c, size_t(elems) * 2, s));  // bf16 ≈ 0.011
    owned.push_back(p);
    return p;
  };
  const int64_t H = m.H, I = m.I;
  Ten x = bf16(dev(H), {1, H}), gain = bf16(dev(H), {H}), attn = bf16(dev(m.o_in), {1, m.o_in});
  Ten hid = bf16(dev(I), {1, I});
  struct Layer {
    GemvJobs in;
    Ten o, gate, up, down;
  };
  std::vector<Layer> layers(size_t(m.layers));
  for (Layer& L : layers) {
    for (int64_t rows : m.in_rows) {
      L.in.w[L.in.n] = bf16(dev(rows * H), {rows, H});
      L.in.y[L.in.n] = bf16(dev(rows), {1, rows});
      ++L.in.n;
    }
    L.o = bf16(dev(H * m.o_in), {H, m.o_in});
    L.gate = bf16(dev(I * H), {I, H});
    L.up = bf16(dev(I * H), {I, H});
    L.down = bf16(dev(H * I), {H, I});
  }
  GemvNorm norm;
  norm.w = gain;
  norm.eps = 1e-6f;
  cudaGraph_t g;
  cudaGraphExec_t e;
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (const Layer& L : layers) {
    gemv_many(ctx, x, L.in, norm);
    gemv_residual(ctx, x, 1.0f, attn, L.o, Ten(), kBF16);
    gemv_glu(ctx, hid, x, L.gate, Ten(), L.up, Ten(), int32_t(hearth::Activation::Silu), norm);
    gemv_residual(ctx, x, 1.0f, hid, L.down, Ten(), kBF16);
  }
  HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  const float ms = time_ms(s, reps, [&] { HEARTH_CUDA_CHECK(cudaGraphLaunch(e, s)); });
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  for (void* p : owned) cudaFree(p);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const bool gemv_only = argc > 2 && std::string(argv[2]) == "gemv";
  HEARTH_CUDA_CHECK(cudaSetDevice(0));
  hearth::cuda::gemv_init();  // the GEMV kernels' shared-memory limits, once
  cudaDeviceProp prop{};
  HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int per_sm = 0;
  HEARTH_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_kernel<true>, kThreads, 0));
  const int grid = prop.multiProcessorCount * per_sm;
  int per_sm_barrier = 0;
  HEARTH_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm_barrier, barrier_kernel<false>, kThreads, 0));
  const int grid_barrier = prop.multiProcessorCount * per_sm_barrier;
  // The loader kernels' ring and input vector, and the input and output of their products.
  const size_t loader_smem = kRingBytes + size_t(kMaxIn8) * 16;
  if (prop.major >= 9)
    for (auto k :
         {loader_kernel<0>, loader_kernel<1>, loader_kernel<2>, loader_kernel<3>, loader_kernel<4>})
      HEARTH_CUDA_CHECK(
          cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(loader_smem)));
  uint4* x = nullptr;
  float* y = nullptr;
  HEARTH_CUDA_CHECK(cudaMalloc(&x, size_t(kMaxIn8) * 16));
  HEARTH_CUDA_CHECK(cudaMemset(x, 0x3c, size_t(kMaxIn8) * 16));  // bf16 ≈ 0.011
  HEARTH_CUDA_CHECK(cudaMalloc(&y, size_t(32768) * 4));          // the most rows of a matrix
  std::printf("%s, %d SMs; read grid %d blocks of %d, barrier grid %d\n", prop.name,
              prop.multiProcessorCount, grid, kThreads, grid_barrier);

  cudaStream_t s;
  HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint32_t* sink = nullptr;
  unsigned long long* count = nullptr;
  HEARTH_CUDA_CHECK(cudaMalloc(&sink, 4));
  HEARTH_CUDA_CHECK(cudaMalloc(&count, 8));

  // Device-to-device copy of 2 GB, for the issue's reference figure.
  if (!gemv_only) {
    const size_t bytes = size_t(2) << 30;
    void *src = nullptr, *dst = nullptr;
    HEARTH_CUDA_CHECK(cudaMalloc(&src, bytes));
    HEARTH_CUDA_CHECK(cudaMalloc(&dst, bytes));
    HEARTH_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, s));
    const float ms = time_ms(s, reps, [&] {
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
    std::printf("cudaMemcpy D2D 2 GiB: %.3f ms, %.2f TB/s (read + write bytes)\n", ms,
                2.0 * bytes / ms / 1e9);
    cudaFree(src);
    cudaFree(dst);
  }

  // One grid barrier's latency, at one block per SM (the loader kernels, the one-kernel step)
  // and at the barrier kernel's grid.
  for (int blocks : {prop.multiProcessorCount, grid_barrier}) {
    if (gemv_only) break;
    constexpr int kBarriers = 2000;
    const float ms = time_ms(s, reps, [&] {
      HEARTH_CUDA_CHECK(cudaMemsetAsync(count, 0, 8, s));
      barriers_only_kernel<<<blocks, kThreads, 0, s>>>(kBarriers, count);
      HEARTH_CUDA_CHECK(cudaGetLastError());
    });
    std::printf("grid barrier alone, %d blocks: %.2f us\n", blocks, 1e3 * ms / kBarriers);
  }

  const std::vector<Model> models = {
      {"qwen3-0.6b", 28, 1024, 3072, 2048, {2048, 1024, 1024}},
      {"qwen3-8b", 36, 4096, 12288, 4096, {4096, 1024, 1024}},
      {"qwen3_5-9b (linear layer)", 32, 4096, 12288, 4096, {8192, 4096, 32, 32}},
  };
  for (const Model& m : models) {
    const std::vector<double> mb = m.mb();
    if (gemv_only) {
      double gb = 0;
      for (double v : mb) gb += v * m.layers / 1e3;
      const float ms = gemv_chain_ms(s, prop.multiProcessorCount, reps, m);
      std::printf("%s: hearth GEMVs %8.3f ms  %5.2f TB/s  %4.1f %% of 4.3\n", m.name, ms, gb / ms,
                  100.0 * gb / ms / 4.3);
      continue;
    }
    const std::vector<int> row_words = m.in8();
    std::vector<size_t> words;
    std::vector<int> in8;
    size_t total = 0;
    for (int l = 0; l < m.layers; ++l)
      for (size_t i = 0; i < mb.size(); ++i) {
        words.push_back(size_t(mb[i] * 1e6 / 16));
        in8.push_back(row_words[i]);
        total += words.back();
      }
    uint4* base = nullptr;
    HEARTH_CUDA_CHECK(cudaMalloc(&base, total * 16));
    HEARTH_CUDA_CHECK(cudaMemsetAsync(base, 3, total * 16, s));
    std::vector<const uint4*> starts;
    size_t at = 0;
    for (size_t w : words) {
      starts.push_back(base + at);
      at += w;
    }
    const uint4** d_starts = nullptr;
    size_t* d_words = nullptr;
    int* d_in8 = nullptr;
    HEARTH_CUDA_CHECK(cudaMalloc(&d_starts, starts.size() * sizeof(void*)));
    HEARTH_CUDA_CHECK(cudaMalloc(&d_words, words.size() * sizeof(size_t)));
    HEARTH_CUDA_CHECK(cudaMalloc(&d_in8, in8.size() * sizeof(int)));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(d_in8, in8.data(), in8.size() * sizeof(int), cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(d_starts, starts.data(), starts.size() * sizeof(void*), cudaMemcpyHostToDevice));
    HEARTH_CUDA_CHECK(
        cudaMemcpy(d_words, words.data(), words.size() * sizeof(size_t), cudaMemcpyHostToDevice));

    auto graph_of = [&](bool pdl) {
      cudaGraph_t g;
      cudaGraphExec_t e;
      HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (size_t k = 0; k < starts.size(); ++k) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(kThreads);
        cfg.stream = s;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = pdl ? 1 : 0;
        if (pdl)
          HEARTH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, read_kernel<true>, starts[k], words[k], sink));
        else
          HEARTH_CUDA_CHECK(
              cudaLaunchKernelEx(&cfg, read_kernel<false>, starts[k], words[k], sink));
      }
      HEARTH_CUDA_CHECK(cudaStreamEndCapture(s, &g));
      HEARTH_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
      cudaGraphDestroy(g);
      return e;
    };
    const double gb = total * 16 / 1e9;
    auto report = [&](const char* how, float ms) {
      std::printf("  %-9s %8.3f ms  %5.2f TB/s  %4.1f %% of 4.3\n", how, ms, gb / ms,
                  100.0 * gb / ms / 4.3);
    };
    std::printf("%s: %d layers of", m.name, m.layers);
    for (double v : mb) std::printf(" %.1f", v);
    std::printf(" MB = %.2f GB (roofline at 4.3 TB/s: %.3f ms)\n", gb, gb / 4.3);
    report("flat", time_ms(s, reps, [&] {
             read_kernel<false><<<grid, kThreads, 0, s>>>(base, total, sink);
             HEARTH_CUDA_CHECK(cudaGetLastError());
           }));
    for (bool pdl : {false, true}) {
      cudaGraphExec_t e = graph_of(pdl);
      report(pdl ? "pdl" : "launches",
             time_ms(s, reps, [&] { HEARTH_CUDA_CHECK(cudaGraphLaunch(e, s)); }));
      cudaGraphExecDestroy(e);
    }
    const Chain c{d_starts, d_words, d_in8, int(starts.size())};
    report("barrier", time_ms(s, reps, [&] {
             HEARTH_CUDA_CHECK(cudaMemsetAsync(count, 0, 8, s));
             barrier_kernel<false><<<grid_barrier, kThreads, 0, s>>>(c, count, sink);
             HEARTH_CUDA_CHECK(cudaGetLastError());
           }));
    report("barrier-a", time_ms(s, reps, [&] {
             HEARTH_CUDA_CHECK(cudaMemsetAsync(count, 0, 8, s));
             barrier_kernel<true><<<grid_barrier, kThreads, 0, s>>>(c, count, sink);
             HEARTH_CUDA_CHECK(cudaGetLastError());
           }));
    if (prop.major >= 9) {
      using Kernel = decltype(&loader_kernel<0>);
      const std::pair<const char*, Kernel> loaders[] = {{"loader", loader_kernel<0>},
                                                        {"loader+dot", loader_kernel<1>},
                                                        {"loader+dot4", loader_kernel<2>},
                                                        {"loader+dep", loader_kernel<3>},
                                                        {"loader+dotr", loader_kernel<4>}};
      for (const auto& row : loaders) {
        const Kernel kernel = row.second;
        report(row.first, time_ms(s, reps, [&] {
                 HEARTH_CUDA_CHECK(cudaMemsetAsync(count, 0, 8, s));
                 kernel<<<prop.multiProcessorCount, kLoaderThreads, loader_smem, s>>>(c, x, y,
                                                                                      count, sink);
                 HEARTH_CUDA_CHECK(cudaGetLastError());
               }));
      }
    }
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaFree(base);
    cudaFree(d_starts);
    cudaFree(d_words);
    cudaFree(d_in8);
    report("hearth", gemv_chain_ms(s, prop.multiProcessorCount, reps, m));
  }
  return 0;
}
