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
//             as hearth's one-kernel decode step runs
//   hearth    hearth's own decode GEMVs (gemv.cu; HEARTH_GEMV_SKIP and the other HEARTH_GEMV_*
//             measurement switches apply) over the same matrices: four launches per layer with
//             the input norm, GLU and residual adds
// Also device-to-device cudaMemcpy (the 4.3 TB/s of the issue counts read + write bytes).
// Usage: bench_cuda_stream [reps] [gemv]   ("gemv": only the hearth row, e.g. to compare
// HEARTH_GEMV_* settings run by run; built only with CUDA; CUDA events; median of reps)
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
  int count;
};

// All matrices in one kernel, a grid barrier before each but the first. The barrier count only
// grows (reset before each launch), so phase k waits until k · gridDim arrivals.
__global__ void __launch_bounds__(kThreads)
    barrier_kernel(Chain c, unsigned long long* count, uint32_t* sink) {
  uint32_t acc = 0;
  for (int k = 0; k < c.count; ++k) {
    acc ^= stream(c.p[k], c.n[k], [&] {
      if (k == 0) return;
      __syncthreads();
      if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(count) : "memory");
        const unsigned long long target = (unsigned long long)k * gridDim.x;
        unsigned long long seen = 0;
        do {
          asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(count) : "memory");
        } while (seen < target);
      }
      __syncthreads();
    });
  }
  keep(acc, sink);
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
};

// hearth's own decode GEMVs (gemv.cu, with the HEARTH_GEMV_* switches set) over the same
// layers, as the decode graph runs them: a graph of four launches per layer with programmatic
// launch (gemv_init has run). Weights are a constant fill (the kernels' speed does not depend on
// the values).
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
  HEARTH_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_barrier, barrier_kernel, kThreads, 0));
  const int grid_barrier = prop.multiProcessorCount * per_sm_barrier;
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
    std::vector<size_t> words;
    size_t total = 0;
    for (int l = 0; l < m.layers; ++l)
      for (double v : mb) {
        words.push_back(size_t(v * 1e6 / 16));
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
    HEARTH_CUDA_CHECK(cudaMalloc(&d_starts, starts.size() * sizeof(void*)));
    HEARTH_CUDA_CHECK(cudaMalloc(&d_words, words.size() * sizeof(size_t)));
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
    const Chain c{d_starts, d_words, int(starts.size())};
    report("barrier", time_ms(s, reps, [&] {
             HEARTH_CUDA_CHECK(cudaMemsetAsync(count, 0, 8, s));
             barrier_kernel<<<grid_barrier, kThreads, 0, s>>>(c, count, sink);
             HEARTH_CUDA_CHECK(cudaGetLastError());
           }));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaFree(base);
    cudaFree(d_starts);
    cudaFree(d_words);
    report("hearth", gemv_chain_ms(s, prop.multiProcessorCount, reps, m));
  }
  return 0;
}
