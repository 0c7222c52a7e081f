// Times prefill attention alone on the GPU: the SIMT kernel against the tensor-core kernel
// (attention_mma.cu: 64- and 128-row query tiles, and the automatic choice) at the Qwen3-8B shape
// (32 query / 8 KV heads of 128) and Qwen3.5's full-attention shape (16 / 4 heads of 256), for
// 512 new tokens after 0, 512 and 1536 cached ones (and one 2048-token chunk). FLOPs:
// 4 · head_dim · n_head · Σ keys each query sees (causal: past + i + 1 for query i), i.e. the
// causal half only. Also prints max |out − out_SIMT| / rms(out_SIMT), a check that both agree.
// Then decode (1 and 4 new tokens, the SIMT kernel with split-K) at cache capacities 256 to 32768
// with the sequence near the end: microseconds per call, from a CUDA graph of `reps` calls (with
// programmatic dependent launch on sm_90+, as the decode graph runs them), and GB/s of K/V read.
// Usage: bench_cuda_attention [reps]   (built only with CUDA; times with CUDA events, L2 warm)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cuda/attention.h"
#include "core/dtype.h"
#include "core/error.h"

using namespace hearth;
using namespace hearth::cuda;

namespace {

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { HEARTH_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

void fill_bf16(Dev& d, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> h(n);
  for (auto& x : h) x = f32_to_bf16(dist(rng));
  HEARTH_CUDA_CHECK(cudaMemcpy(d.p, h.data(), n * 2, cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const Dev& d, size_t n) {
  std::vector<uint16_t> h(n);
  HEARTH_CUDA_CHECK(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

// The cache as the kernels see it: bf16 rows of n_head_kv · head_dim, `first` in device memory.
KvDev cache_view(const Dev& k, const Dev& v, const Dev& first, int64_t cap, int64_t row) {
  KvDev kv;
  kv.k.p = k.p;
  kv.v.p = v.p;
  kv.k.dtype = kv.v.dtype = kBF16;
  kv.k.ndim = kv.v.ndim = 2;
  kv.k.d[0] = kv.v.d[0] = cap;
  kv.k.d[1] = kv.v.d[1] = row;
  kv.capacity = cap;
  kv.first = static_cast<const int32_t*>(first.p);
  return kv;
}

// A bf16 [n, heads, hd] tensor (q or the output).
Ten heads_view(void* p, int64_t n, int heads, int hd) {
  Ten t;
  t.p = p;
  t.dtype = kBF16;
  t.ndim = 3;
  t.d[0] = n;
  t.d[1] = heads;
  t.d[2] = hd;
  return t;
}

struct Shape {
  const char* name;
  int n_head, n_head_kv, hd, n, past;
};

void run(Ctx& ctx, const Shape& s, int reps) {
  const int64_t cap = s.past + s.n, row = int64_t(s.n_head_kv) * s.hd;
  const size_t q_elems = size_t(s.n) * s.n_head * s.hd;
  Dev k(size_t(cap * row) * 2), v(size_t(cap * row) * 2), q(q_elems * 2), o(q_elems * 2),
      o_ref(q_elems * 2), pos(size_t(s.n) * 4), first(4);
  fill_bf16(k, size_t(cap * row), 1);
  fill_bf16(v, size_t(cap * row), 2);
  fill_bf16(q, q_elems, 3);
  std::vector<int32_t> hpos(size_t(s.n));
  for (int i = 0; i < s.n; ++i) hpos[size_t(i)] = s.past + i;
  const int32_t zero = 0;
  HEARTH_CUDA_CHECK(cudaMemcpy(pos.p, hpos.data(), hpos.size() * 4, cudaMemcpyHostToDevice));
  HEARTH_CUDA_CHECK(cudaMemcpy(first.p, &zero, 4, cudaMemcpyHostToDevice));

  const KvDev kv = cache_view(k, v, first, cap, row);
  const Ten tq = heads_view(q.p, s.n, s.n_head, s.hd);
  Ten to = tq;
  const AttentionParams p{s.n_head, s.n_head_kv, s.hd, 1.0f / std::sqrt(float(s.hd)), 0.0f, 0};
  const double keys = double(s.n) * s.past + double(s.n) * (s.n + 1) / 2.0;
  const double flops = 4.0 * s.hd * s.n_head * keys;

  cudaEvent_t e0, e1;
  HEARTH_CUDA_CHECK(cudaEventCreate(&e0));
  HEARTH_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ref;
  double simt_us = 0.0;
  const struct {
    AttentionKernel k;
    const char* name;
  } kernels[] = {{AttentionKernel::Simt, "simt"},
                 {AttentionKernel::Mma64, "mma64"},
                 {AttentionKernel::Mma128, "mma128"},
                 {AttentionKernel::Auto, "auto"}};
  for (const auto& kern : kernels) {
    if (kern.k == AttentionKernel::Mma128 && s.hd > 128) continue;  // not built: runs mma64
    attention_set_kernel(kern.k);
    to.p = kern.k == AttentionKernel::Simt ? o_ref.p : o.p;
    HEARTH_CUDA_CHECK(cudaMemsetAsync(to.p, 0xff, q_elems * 2, ctx.stream));  // NaN poison
    for (int i = 0; i < 2; ++i) attention(ctx, to, tq, kv, static_cast<const int32_t*>(pos.p), p);
    HEARTH_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
    for (int i = 0; i < reps; ++i)
      attention(ctx, to, tq, kv, static_cast<const int32_t*>(pos.p), p);
    HEARTH_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / reps;
    double diff = 0.0;
    if (kern.k == AttentionKernel::Simt) {
      ref = download_bf16(o_ref, q_elems);
      simt_us = us;
    } else {
      const auto got = download_bf16(o, q_elems);
      double ss = 0.0;
      for (float x : ref) ss += double(x) * x;
      const double rms = std::sqrt(ss / double(ref.size()));
      for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(ref[i]));
        diff = std::isnan(d) ? INFINITY : std::max(diff, d / rms);
        if (std::isinf(diff)) break;
      }
    }
    std::printf("%-9s %3d/%-2d hd %3d  n %4d past %4d  %-6s %9.1f us  %6.1f TFLOP/s  x%-6.1f",
                s.name, s.n_head, s.n_head_kv, s.hd, s.n, s.past, kern.name, us,
                flops / (us * 1e-6) * 1e-12, simt_us / us);
    if (kern.k != AttentionKernel::Simt) std::printf("  max|d|/rms vs simt %.2e", diff);
    std::printf("\n");
  }
  attention_set_kernel(AttentionKernel::Auto);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

struct Decode {
  const char* name;
  int n_head, n_head_kv, hd, n, len;
  int64_t capacity;
};

// Decode steps as the decode graph runs them: the sequence holds `len` positions after this
// step's n tokens, the cache `capacity` rows (the split count depends on it alone).
void run_decode(Ctx& ctx, const Decode& s, int reps) {
  const int64_t cap = s.capacity, row = int64_t(s.n_head_kv) * s.hd;
  const size_t q_elems = size_t(s.n) * s.n_head * s.hd;
  Dev k(size_t(cap * row) * 2), v(size_t(cap * row) * 2), q(q_elems * 2), o(q_elems * 2),
      pos(size_t(s.n) * 4), first(4);
  fill_bf16(k, size_t(cap * row), 11);
  fill_bf16(v, size_t(cap * row), 12);
  fill_bf16(q, q_elems, 13);
  std::vector<int32_t> hpos(size_t(s.n));
  for (int i = 0; i < s.n; ++i) hpos[size_t(i)] = s.len - s.n + i;
  const int32_t first_pos = int32_t(std::max<int64_t>(0, s.len - cap));
  HEARTH_CUDA_CHECK(cudaMemcpy(pos.p, hpos.data(), hpos.size() * 4, cudaMemcpyHostToDevice));
  HEARTH_CUDA_CHECK(cudaMemcpy(first.p, &first_pos, 4, cudaMemcpyHostToDevice));
  const KvDev kv = cache_view(k, v, first, cap, row);
  const Ten tq = heads_view(q.p, s.n, s.n_head, s.hd);
  const Ten to = heads_view(o.p, s.n, s.n_head, s.hd);
  const AttentionParams p{s.n_head, s.n_head_kv, s.hd, 1.0f / std::sqrt(float(s.hd)), 0.0f, 0};
  const size_t ws = attention_workspace_bytes(ctx, s.n, p, cap);
  Dev wsd(std::max<size_t>(ws, 4));
  HEARTH_CUDA_CHECK(cudaMemset(wsd.p, 0, std::max<size_t>(ws, 4)));
  ctx.attn_ws = static_cast<float*>(wsd.p);
  ctx.attn_ws_bytes = ws;
  const auto* d_pos = static_cast<const int32_t*>(pos.p);
  HEARTH_CUDA_CHECK(cudaMemsetAsync(o.p, 0xff, q_elems * 2, ctx.stream));  // NaN poison
  attention(ctx, to, tq, kv, d_pos, p);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) attention(ctx, to, tq, kv, d_pos, p);
  HEARTH_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
  HEARTH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  HEARTH_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));  // warm-up
  cudaEvent_t e0, e1;
  HEARTH_CUDA_CHECK(cudaEventCreate(&e0));
  HEARTH_CUDA_CHECK(cudaEventCreate(&e1));
  HEARTH_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
  HEARTH_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));
  HEARTH_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
  HEARTH_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0.0f;
  HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  const double us = 1e3 * ms / reps;
  const int64_t keys = std::min<int64_t>(s.len, cap);
  const double bytes = 2.0 * double(keys) * double(row) * 2.0;
  const auto got = download_bf16(o, q_elems);
  size_t nans = 0;
  for (float x : got) nans += std::isnan(x) ? 1 : 0;
  std::printf("%-9s %3d/%-2d hd %3d  decode n %d  len %5d cap %5lld  %7.2f us  %7.1f GB/s%s\n",
              s.name, s.n_head, s.n_head_kv, s.hd, s.n, s.len, static_cast<long long>(cap), us,
              bytes / (us * 1e-6) * 1e-9, nans ? "  NaN in output!" : "");
  ctx.attn_ws = nullptr;
  ctx.attn_ws_bytes = 0;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  try {
    HEARTH_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    Ctx ctx;
    HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    ctx.sm_count = prop.multiProcessorCount;
    attention_init();
    std::printf("%s, %d SMs; %d reps per row\n", prop.name, ctx.sm_count, reps);
    const Shape shapes[] = {{"qwen3-8b", 32, 8, 128, 512, 0},    {"qwen3-8b", 32, 8, 128, 512, 512},
                            {"qwen3-8b", 32, 8, 128, 512, 1536}, {"qwen3-8b", 32, 8, 128, 2048, 0},
                            {"qwen3.5", 16, 4, 256, 512, 0},     {"qwen3.5", 16, 4, 256, 512, 512},
                            {"qwen3.5", 16, 4, 256, 512, 1536}};
    for (const Shape& s : shapes) run(ctx, s, reps);
    ctx.pdl = prop.major >= 9;
    const Decode decodes[] = {
        {"qwen3-8b", 32, 8, 128, 1, 130, 256},     {"qwen3-8b", 32, 8, 128, 1, 4000, 4096},
        {"qwen3-8b", 32, 8, 128, 1, 30000, 32768}, {"qwen3-8b", 32, 8, 128, 4, 130, 256},
        {"qwen3-8b", 32, 8, 128, 4, 4000, 4096},   {"qwen3.5", 16, 4, 256, 1, 130, 256},
        {"qwen3.5", 16, 4, 256, 1, 4000, 4096},    {"qwen3.5", 16, 4, 256, 1, 30000, 32768}};
    for (const Decode& d : decodes) run_decode(ctx, d, std::max(reps, 100));
    cudaStreamDestroy(ctx.stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
