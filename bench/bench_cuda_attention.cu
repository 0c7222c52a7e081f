// Times attention alone on the GPU, over paged caches laid out as KvCache's (64-position blocks
// of one layer's key rows then value rows, the blocks in shuffled order as a pool hands them out).
// Prefill: the SIMT kernel against the tensor-core kernel (attention_mma.cu: 64- and 128-row
// query tiles, and the automatic choice) at the Qwen3-8B shape (32 query / 8 KV heads of 128)
// and Qwen3.5's full-attention shape (16 / 4 heads of 256), for 512 new tokens after 0, 512 and
// 1536 cached ones (and one 2048-token chunk). FLOPs: 4 · head_dim · n_head · Σ keys each query
// sees (causal: past + i + 1 for query i), i.e. the causal half only. Also prints
// max |out − out_SIMT| / rms(out_SIMT), a check that both agree.
// Decode of one sequence (1 and 4 new tokens, the SIMT kernel with split-K) at lengths 130 to
// 30000, and decode rows (attention_rows: one token of each of 8 to 256 sequences of ~1568
// positions, a 1k/1k serving step's mean) by the SIMT and the tensor-core rows kernels:
// microseconds per call, from a CUDA graph of `reps` calls (with programmatic dependent launch
// on sm_90+, as the decode graphs run them), and GB/s of K/V read.
// Usage: bench_cuda_attention [reps]   (built only with CUDA; times with CUDA events)
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
#include "cuda_graph_timing.cuh"

using namespace hearth;
using namespace hearth::cuda;

namespace {

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { HEARTH_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
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

std::vector<float> download_bf16(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  HEARTH_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

void upload(void* dst, const void* src, size_t bytes) {
  HEARTH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

// Sequences of `len` positions each over one pool of 64-position blocks (one layer: the block's
// key rows, then its value rows), the pool's blocks handed out in shuffled order; every table
// has `stride` entries (the longest sequence's, rounded up to a power of two as the backend's).
struct PagedCaches {
  int64_t row, stride, span;
  Dev pool, tables, first;
  std::vector<int64_t> lens;

  static int64_t span_of(int64_t len) {
    int64_t s = 256;
    while (s < len) s *= 2;
    return s;
  }
  static int64_t blocks_of(const std::vector<int64_t>& lens) {
    int64_t n = 0;
    for (int64_t l : lens) n += (l + kKvBlock - 1) / kKvBlock;
    return n;
  }
  PagedCaches(int64_t row_, std::vector<int64_t> lens_, uint32_t seed)
      : row(row_),
        stride(span_of(*std::max_element(lens_.begin(), lens_.end())) / kKvBlock),
        span(stride * kKvBlock),
        pool(size_t(blocks_of(lens_) * block_elems()) * 2),
        tables(size_t(stride) * lens_.size() * sizeof(void*)),
        first(4),
        lens(std::move(lens_)) {
    const int64_t n_blocks = blocks_of(lens);
    fill_bf16(pool, size_t(n_blocks * block_elems()), seed);
    std::vector<int64_t> order(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_blocks; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    std::vector<void*> host(size_t(stride) * lens.size(), nullptr);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s)
      for (int64_t b = 0; b < (lens[s] + kKvBlock - 1) / kKvBlock; ++b)
        host[s * size_t(stride) + size_t(b)] =
            static_cast<uint16_t*>(pool.p) + order[next++] * block_elems();
    upload(tables.p, host.data(), host.size() * sizeof(void*));
    const int32_t zero = 0;
    upload(first.p, &zero, 4);
  }
  int64_t block_elems() const { return 2 * kKvBlock * row; }
  // Sequence s's cache as attention() reads it.
  KvDev view(size_t s = 0) const {
    KvDev kv;
    kv.blocks = static_cast<void* const*>(tables.p) + s * size_t(stride);
    kv.k_off = 0;
    kv.v_off = kKvBlock * row;
    kv.span = span;
    kv.first = static_cast<const int32_t*>(first.p);
    return kv;
  }
  // The rows' caches as attention_rows reads them (first 0 each).
  std::vector<SeqKv> seq_kvs() const {
    std::vector<SeqKv> t;
    for (size_t s = 0; s < lens.size(); ++s) t.push_back(SeqKv{view(s).blocks, 0, 0});
    return t;
  }
};

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

// max |got − ref| / rms(ref) (inf on NaN).
double rel_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  double ss = 0.0, diff = 0.0;
  for (float x : ref) ss += double(x) * x;
  const double rms = std::sqrt(ss / double(ref.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (std::isnan(d)) return INFINITY;
    diff = std::max(diff, d / rms);
  }
  return diff;
}

// Microseconds per call of `call`, from a CUDA graph of `reps` calls after one warm-up call.
template <typename F>
double graph_us(Ctx& ctx, int reps, F call) {
  return 1e3 * graph_ms_per_call(ctx, reps, 1, [&](int) { call(); });
}

// A zeroed split-K workspace of `bytes` for ctx.
struct Workspace {
  Dev d;
  Workspace(Ctx& ctx, size_t bytes) : d(bytes) {
    HEARTH_CUDA_CHECK(cudaMemset(d.p, 0, std::max<size_t>(bytes, 16)));
    ctx.attn_ws = static_cast<float*>(d.p);
    ctx.attn_ws_bytes = bytes;
  }
};

struct Shape {
  const char* name;
  int n_head, n_head_kv, hd, n, past;
};

void run(Ctx& ctx, const Shape& s, int reps) {
  const int64_t row = int64_t(s.n_head_kv) * s.hd;
  const size_t q_elems = size_t(s.n) * s.n_head * s.hd;
  PagedCaches cache(row, {s.past + s.n}, 1);
  Dev q(q_elems * 2), o(q_elems * 2), o_ref(q_elems * 2), pos(size_t(s.n) * 4);
  fill_bf16(q, q_elems, 3);
  std::vector<int32_t> hpos(size_t(s.n));
  for (int i = 0; i < s.n; ++i) hpos[size_t(i)] = s.past + i;
  upload(pos.p, hpos.data(), hpos.size() * 4);
  const KvDev kv = cache.view();
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
      ref = download_bf16(o_ref.p, q_elems);
      simt_us = us;
    } else {
      diff = rel_diff(download_bf16(o.p, q_elems), ref);
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
};

// Decode steps as the decode graph runs them: the sequence holds `len` positions after this
// step's n tokens (the split count depends on its span alone).
void run_decode(Ctx& ctx, const Decode& s, int reps) {
  const int64_t row = int64_t(s.n_head_kv) * s.hd;
  const size_t q_elems = size_t(s.n) * s.n_head * s.hd;
  PagedCaches cache(row, {s.len}, 11);
  Dev q(q_elems * 2), o(q_elems * 2), pos(size_t(s.n) * 4);
  fill_bf16(q, q_elems, 13);
  std::vector<int32_t> hpos(size_t(s.n));
  for (int i = 0; i < s.n; ++i) hpos[size_t(i)] = s.len - s.n + i;
  upload(pos.p, hpos.data(), hpos.size() * 4);
  const KvDev kv = cache.view();
  const Ten tq = heads_view(q.p, s.n, s.n_head, s.hd);
  const Ten to = heads_view(o.p, s.n, s.n_head, s.hd);
  const AttentionParams p{s.n_head, s.n_head_kv, s.hd, 1.0f / std::sqrt(float(s.hd)), 0.0f, 0};
  Workspace ws(ctx, attention_workspace_bytes(ctx, s.n, p, kv.span));
  const auto* d_pos = static_cast<const int32_t*>(pos.p);
  HEARTH_CUDA_CHECK(cudaMemsetAsync(o.p, 0xff, q_elems * 2, ctx.stream));  // NaN poison
  const double us = graph_us(ctx, reps, [&] { attention(ctx, to, tq, kv, d_pos, p); });
  const double bytes = 2.0 * double(s.len) * double(row) * 2.0;
  const auto got = download_bf16(o.p, q_elems);
  size_t nans = 0;
  for (float x : got) nans += std::isnan(x) ? 1 : 0;
  std::printf("%-9s %3d/%-2d hd %3d  decode n %d  len %5d span %5lld  %7.2f us  %7.1f GB/s%s\n",
              s.name, s.n_head, s.n_head_kv, s.hd, s.n, s.len, static_cast<long long>(kv.span), us,
              bytes / (us * 1e-6) * 1e-9, nans ? "  NaN in output!" : "");
  ctx.attn_ws = nullptr;
  ctx.attn_ws_bytes = 0;
}

// Decode rows: one token of each of `seqs` sequences, their lengths spread ±12.5 % around len
// (a serving step's mix), each over its own table. The SIMT kernel, then the tensor-core rows
// kernel, in one graph each; the second's output checked against the first's.
void run_rows(Ctx& ctx, const Decode& s, int seqs, int reps) {
  const int64_t row = int64_t(s.n_head_kv) * s.hd;
  const size_t q_elems = size_t(seqs) * s.n_head * s.hd;
  std::vector<int64_t> lens;
  std::mt19937 rng(static_cast<uint32_t>(seqs));
  std::uniform_int_distribution<int64_t> jitter(-s.len / 8, s.len / 8);
  double keys = 0.0;
  for (int r = 0; r < seqs; ++r) {
    lens.push_back(std::max<int64_t>(1, s.len + jitter(rng)));
    keys += double(lens.back());
  }
  PagedCaches cache(row, lens, 21);
  Dev q(q_elems * 2), o(q_elems * 2), pos(size_t(seqs) * 4), table(size_t(seqs) * sizeof(SeqKv));
  fill_bf16(q, q_elems, 23);
  std::vector<int32_t> hpos;
  for (int64_t l : lens) hpos.push_back(int32_t(l - 1));
  upload(pos.p, hpos.data(), hpos.size() * 4);
  const std::vector<SeqKv> kvs = cache.seq_kvs();
  upload(table.p, kvs.data(), kvs.size() * sizeof(SeqKv));
  const KvDev kv = cache.view();
  const Ten tq = heads_view(q.p, seqs, s.n_head, s.hd);
  const Ten to = heads_view(o.p, seqs, s.n_head, s.hd);
  const AttentionParams p{s.n_head, s.n_head_kv, s.hd, 1.0f / std::sqrt(float(s.hd)), 0.0f, 0};
  Workspace ws(ctx, attention_workspace_bytes(ctx, seqs, p, kv.span, true));
  const auto* d_pos = static_cast<const int32_t*>(pos.p);
  const auto* d_table = static_cast<const SeqKv*>(table.p);
  const double bytes = 2.0 * keys * double(row) * 2.0;
  std::vector<float> ref;
  double simt_us = 0.0;
  for (const AttentionKernel k : {AttentionKernel::Simt, AttentionKernel::Auto}) {
    attention_set_kernel(k);
    HEARTH_CUDA_CHECK(cudaMemsetAsync(o.p, 0xff, q_elems * 2, ctx.stream));  // NaN poison
    const double us =
        graph_us(ctx, reps, [&] { attention_rows(ctx, to, tq, kv, d_table, d_pos, p); });
    const auto got = download_bf16(o.p, q_elems);
    std::printf("%-9s %3d/%-2d hd %3d  rows %3d  len ~%5d  %-4s %8.2f us  %7.1f GB/s", s.name,
                s.n_head, s.n_head_kv, s.hd, seqs, s.len,
                k == AttentionKernel::Simt ? "simt" : "auto", us, bytes / (us * 1e-6) * 1e-9);
    if (k == AttentionKernel::Simt) {
      ref = got;
      simt_us = us;
      std::printf("%s\n", std::isinf(rel_diff(got, got)) ? "  NaN in output!" : "");
    } else {
      std::printf("  x%.2f  max|d|/rms vs simt %.2e\n", simt_us / us, rel_diff(got, ref));
    }
  }
  attention_set_kernel(AttentionKernel::Auto);
  ctx.attn_ws = nullptr;
  ctx.attn_ws_bytes = 0;
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
        {"qwen3-8b", 32, 8, 128, 1, 130},   {"qwen3-8b", 32, 8, 128, 1, 4000},
        {"qwen3-8b", 32, 8, 128, 1, 30000}, {"qwen3-8b", 32, 8, 128, 4, 130},
        {"qwen3-8b", 32, 8, 128, 4, 4000},  {"qwen3.5", 16, 4, 256, 1, 130},
        {"qwen3.5", 16, 4, 256, 1, 4000},   {"qwen3.5", 16, 4, 256, 1, 30000}};
    for (const Decode& d : decodes) run_decode(ctx, d, std::max(reps, 100));
    const Decode rows[] = {{"qwen3-8b", 32, 8, 128, 1, 1568},
                           {"qwen3.5", 16, 4, 256, 1, 1568},
                           {"llama-mha", 32, 32, 128, 1, 1568},
                           {"qwen3-8b", 32, 8, 128, 1, 8192}};
    for (const Decode& d : rows)
      for (int seqs : {8, 32, 64, 128, 256})
        if (d.len * int64_t(seqs) <= 256 * 1568) run_rows(ctx, d, seqs, std::max(reps, 50));
    cudaStreamDestroy(ctx.stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
