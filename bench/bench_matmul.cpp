// bench_matmul: speed of cpu::matmul on Qwen3-0.6B shapes against the machine's roofline.
// Measures the read bandwidth first (streaming sum over 1 GiB with the pool's threads), then:
// decode GEMV (n = 1) and small n cycling over distinct weight copies totalling > 1 GiB so no
// cache helps, and prefill (n = 512) GFLOP/s. Prints shape, n, dtype, time, GB/s, GFLOP/s and %
// of the measured bandwidth. Usage: bench_matmul [--threads N] [--isa generic|avx2|avx512|amx]
//                                                [--quick] [--only decode|small|prefill]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

using namespace hearth;
using cpu::detail::MatmulIsa;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  float out[16];
  _mm512_storeu_ps(out, s);
  float t = 0;
  for (float f : out) t += f;
  return t;
}

// Best of a few streaming sums over 1 GiB, split statically across the pool like the matmul.
double measure_bandwidth(ThreadPool& pool) {
  const size_t bytes = size_t(1) << 30, n = bytes / 4;
  Buffer buf(bytes);
  float* p = static_cast<float*>(buf.data());
  pool.parallel_for(int64_t(n), 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = 1.0f;
  });
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> sums(size_t(pool.size()));
    double t0 = now();
    pool.run([&](int t, int nt) {
      size_t b = n * size_t(t) / size_t(nt) / 64 * 64, e = n * size_t(t + 1) / size_t(nt) / 64 * 64;
      sums[size_t(t)] = sum_avx512(p + b, e - b);
    });
    double dt = now() - t0;
    for (float s : sums) sink = sink + s;
    best = std::max(best, double(bytes) / dt / 1e9);
  }
  return best;
}

// Random finite values of the dtype; the byte pattern is what matters to the bench.
void fill(void* data, size_t count, DType dt, ThreadPool& pool) {
  pool.parallel_for(int64_t(count), 1 << 20, [&](int64_t b, int64_t e) {
    uint32_t s = uint32_t(b) * 2654435761u + 12345u;
    for (int64_t i = b; i < e; ++i) {
      s ^= s << 13, s ^= s >> 17, s ^= s << 5;
      float v = float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23) * 0.05f;
      if (dt == DType::BF16)
        static_cast<uint16_t*>(data)[i] = f32_to_bf16(v);
      else if (dt == DType::F16)
        static_cast<uint16_t*>(data)[i] = f32_to_f16(v);
      else
        static_cast<float*>(data)[i] = v;
    }
  });
}

struct Shape {
  const char* name;
  int64_t in, out;
};

struct Bench {
  ThreadPool& pool;
  MatmulIsa isa;
  double bandwidth;
  Buffer weights;  // > 1 GiB, reused for every shape
  Buffer x, y;
  DType filled = DType::F64;  // which dtype `weights` holds

  void run(const Shape& s, int64_t n, DType dt, double min_seconds) {
    const size_t mat_bytes = size_t(s.in * s.out) * dtype_size(dt);
    if (filled != dt) {
      fill(weights.data(), weights.size() / dtype_size(dt), dt, pool);
      filled = dt;
    }
    // Distinct copies cycled through so every call streams from DRAM (n small), or one copy
    // when compute-bound (n large: a GiB of lm_head copies would only slow the bench down).
    const size_t copies = n >= 64 ? 1 : std::max<size_t>(1, weights.size() / mat_bytes);
    x.reserve(size_t(n * s.in) * 4);
    y.reserve(size_t(n * s.out) * 4);
    fill(x.data(), size_t(n * s.in), DType::F32, pool);
    Tensor xt(x.data(), DType::F32, {n, s.in});
    Tensor yt(y.data(), DType::F32, {n, s.out});
    auto call = [&](size_t i) {
      Tensor wt(static_cast<char*>(weights.data()) + (i % copies) * mat_bytes, dt, {s.out, s.in});
      cpu::detail::matmul_with(isa, yt, xt, wt, Tensor(), pool);
    };
    call(0);  // warm-up: scratch growth, page faults of y
    size_t iters = 0;
    double t0 = now(), dt_total = 0;
    while ((dt_total = now() - t0) < min_seconds || iters < 3) call(iters++);
    const double sec = dt_total / double(iters);
    const double gbs = double(mat_bytes) / sec / 1e9;
    const double gflops = 2.0 * double(n) * double(s.in) * double(s.out) / sec / 1e9;
    std::printf("| %-12s | %5lld x %-6lld | %4lld | %-4s | %9.1f us | %7.1f | %8.1f | %5.1f%% |\n",
                s.name, (long long)s.in, (long long)s.out, (long long)n,
                std::string(dtype_name(dt)).c_str(), sec * 1e6, gbs, gflops,
                100.0 * gbs / bandwidth);
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  std::string only;  // decode | small | prefill: one section of the table
  MatmulIsa isa = cpu::detail::matmul_best_isa();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--quick")
      quick = true;
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--isa" && i + 1 < argc) {
      std::string v = argv[++i];
      isa = v == "generic"  ? MatmulIsa::Generic
            : v == "avx2"   ? MatmulIsa::Avx2
            : v == "avx512" ? MatmulIsa::Avx512
                            : MatmulIsa::Amx;
      if (!cpu::detail::matmul_isa_supported(isa)) {
        std::fprintf(stderr, "isa %s not supported here\n", v.c_str());
        return 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_matmul [--threads N] [--isa I] [--quick]\n");
      return 1;
    }
  }
  ThreadPool pool(threads);
  const double bw = measure_bandwidth(pool);
  std::printf(
      "threads %d, kernels %s (best: %s), read bandwidth %.1f GB/s (1 GiB streaming sum)\n\n",
      pool.size(), cpu::detail::matmul_isa_name(isa), cpu::matmul_isa().c_str(), bw);
  Bench b{pool, isa, bw, Buffer(size_t(1200) << 20), Buffer(), Buffer()};

  const Shape decode[] = {{"q_proj", 1024, 2048},    {"k/v_proj", 1024, 1024},
                          {"o_proj", 2048, 1024},    {"gate/up", 1024, 3072},
                          {"down_proj", 3072, 1024}, {"lm_head", 1024, 151936}};
  const double t = quick ? 0.3 : 1.0;
  std::printf(
      "| shape        |   in x out     |    n | w    |      time    |  GB/s   | GFLOP/s  | %% bw   "
      "|\n");
  std::printf(
      "|--------------|----------------|------|------|--------------|---------|----------|--------|"
      "\n");
  if (only.empty() || only == "decode") {
    for (const Shape& s : decode) b.run(s, 1, DType::BF16, t);
    for (const Shape& s : {decode[3], decode[5]})
      for (DType dt : {DType::F16, DType::F32}) b.run(s, 1, dt, t);
  }
  if (only.empty() || only == "small") {
    for (int64_t n : {2, 4, 8, 16}) b.run(decode[3], n, DType::BF16, t);
    for (int64_t n : {2, 4, 8, 16, 32}) b.run(decode[5], n, DType::BF16, t);
  }
  if (only.empty() || only == "prefill") {
    for (const Shape& s : {decode[0], decode[3], decode[4], decode[5]})
      b.run(s, 512, DType::BF16, s.out > 10000 ? 0.0 : t);
    if (!quick)
      for (DType dt : {DType::F16, DType::F32}) b.run(decode[3], 512, dt, t);
  }
  return 0;
}
