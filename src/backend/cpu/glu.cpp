// The MLP's gated activation, y = act(gate) · up, and the residual add: in prefill these are
// millions of elements per layer (512 tokens × 3584 on the Qwen3.5-0.8B shape), where a scalar
// expf on one thread took 11 % of pp512. SiLU uses the vector exp of gdn_simd.h under the best
// ISA; the GELUs stay scalar (rare, and erf/tanh have no vector form here). Both split across
// the thread pool when there is enough work to pay for waking it.
#include <cmath>

#include "backend/cpu/gdn_simd.h"
#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace hearth::cpu {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which one thread is faster

GDN_INLINE void silu_glu_span(float* y, const float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    gdn::store16(y + i, gdn::silu16(gdn::load16(g + i)) * gdn::load16(u + i));
  for (; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

#if defined(__x86_64__)
GDN_TARGET_AVX512 void silu_glu_avx512(float* y, const float* g, const float* u, int64_t n) {
  silu_glu_span(y, g, u, n);
}
GDN_TARGET_AVX2 void silu_glu_avx2(float* y, const float* g, const float* u, int64_t n) {
  silu_glu_span(y, g, u, n);
}
#endif

void silu_glu(float* y, const float* g, const float* u, int64_t n) {
  switch (gdn::isa()) {
#if defined(__x86_64__)
    case gdn::Isa::Avx512:
      return silu_glu_avx512(y, g, u, n);
    case gdn::Isa::Avx2:
      return silu_glu_avx2(y, g, u, n);
#endif
    default:
      return silu_glu_span(y, g, u, n);
  }
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }

// body(begin, end) over [0, n), on the pool when n is large.
template <typename Body>
void for_range(ThreadPool& pool, int64_t n, const Body& body) {
  if (n < kParallelMin) return body(int64_t(0), n);
  pool.parallel_for(n, kParallelMin / 4, body);
}

}  // namespace

void glu_span(float* y, const float* gate, const float* up, int64_t n, Activation act) {
  switch (act) {
    case Activation::Silu:
      return silu_glu(y, gate, up, n);
    case Activation::GeluTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(gate[i]) * up[i];
      return;
    case Activation::Gelu:
      for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(gate[i]) * up[i];
      return;
  }
}

void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act, ThreadPool& pool) {
  const float* g = gate.as<const float>();
  const float* u = up.as<const float>();
  float* out = y.as<float>();
  for_range(pool, y.numel(),
            [&](int64_t b, int64_t e) { glu_span(out + b, g + b, u + b, e - b, act); });
}

void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale, ThreadPool& pool) {
  const float* pa = a.as<const float>();
  const float* pb = b.as<const float>();
  float* out = y.as<float>();
  for_range(pool, y.numel(), [&](int64_t lo, int64_t hi) {
    if (b_scale == 1.0f) {
      for (int64_t i = lo; i < hi; ++i) out[i] = pa[i] + pb[i];
    } else {
      for (int64_t i = lo; i < hi; ++i) out[i] = pa[i] + pb[i] * b_scale;
    }
  });
}

}  // namespace hearth::cpu
