// Trellis matvec dispatcher: checks the arguments, lays x out for the kernels once per call
// (permuted to the lane order for the gather, scaled per code row for the scatter) and splits
// the outputs across the pool. The kernels are in trellis_matvec_kernels.h, built for baseline
// x86-64 here and for AVX2 / AVX-512 (+VNNI, VBMI2) in their own files; the family is picked
// once from CPUID.
// The 1/147.8 of the code and the fp16 scale are applied once per dot product (axis 1) or
// folded into the input coefficient (axis 0), never per weight.
#include "backend/cpu/trellis_matvec.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/kernel_family.h"
#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/trellis.h"
// Last: its templates compile for this file's (baseline) ISA.
#include "backend/cpu/trellis_matvec_kernels.h"

namespace hearth::cpu {

namespace trellis {
void gather_generic(const Args& a, int k, int64_t begin, int64_t end) {
  gather<GenericOps>(a, k, begin, end);
}
void scatter_generic(const Args& a, int k, int64_t begin, int64_t end) {
  scatter<GenericOps>(a, k, begin, end);
}
}  // namespace trellis

namespace {

constexpr int kT = quant::TrellisSpec::kBlock;

using Family = KernelFamily;

bool family_supported(Family f) {
  using detail::MatmulIsa;
  if (f == Family::Avx2) return detail::matmul_isa_supported(MatmulIsa::Avx2);
#if defined(__x86_64__)
  if (f == Family::Avx512)
    return detail::matmul_isa_supported(MatmulIsa::Avx512) &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi2");
#endif
  return f == Family::Generic;
}

Family best_family() {
  static const Family best = best_kernel_family(family_supported);
  return best;
}

using RangeFn = void (*)(const trellis::Args&, int, int64_t, int64_t);

RangeFn pick(Family f, int axis) {
  switch (f) {
    case Family::Avx512:
      return axis == 1 ? trellis::gather_avx512 : trellis::scatter_avx512;
    case Family::Avx2:
      return axis == 1 ? trellis::gather_avx2 : trellis::scatter_avx2;
    default:
      return axis == 1 ? trellis::gather_generic : trellis::scatter_generic;
  }
}

void run(Family f, const uint32_t* codes, const uint16_t* scales_f16, int64_t rows, int64_t cols,
         int k, int axis, const float* x, int64_t n, float* y, ThreadPool& pool) {
  quant::trellis_check_bits(k, "trellis_matvec");
  if (axis != 0 && axis != 1) fail("trellis_matvec: axis must be 0 or 1, got {}", axis);
  const int64_t coded = axis == 1 ? cols : rows;  // the dimension blocks run along
  if (rows <= 0 || cols <= 0 || coded % kT != 0)
    fail("trellis_matvec: W [{}, {}] with axis {} needs its {} dim a multiple of {}", rows, cols,
         axis, axis == 1 ? "input" : "output", kT);
  if (n <= 0) return;

  // Per calling thread, grown once: the permuted x (axis 1) or the input coefficients (axis 0).
  thread_local std::vector<float> xs;
  if (xs.size() < size_t(n * cols)) xs.resize(size_t(n * cols));
  if (axis == 1) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < cols / kT; ++b) {
        const float* src = x + j * cols + b * kT;
        float* dst = xs.data() + j * cols + b * kT;
        for (int i = 0; i < 32; ++i)
          for (int l = 0; l < 8; ++l) dst[i * 8 + l] = src[kT - 1 - 32 * l - i];
      }
  } else {
    for (int64_t r = 0; r < cols; ++r) {
      const float s = f16_to_f32(scales_f16[r]) / quant::kTrellis1madScale;
      for (int64_t j = 0; j < n; ++j) xs[size_t(j * cols + r)] = x[j * cols + r] * s;
    }
  }

  const trellis::Args args{codes, scales_f16, rows, cols, n, xs.data(), y};
  const RangeFn fn = pick(f, axis);
  if (axis == 1) {
    // ~32 KiB of codes per task at least, so small matrices stay on one thread.
    const int64_t grain = std::max<int64_t>(1, (32 << 10) / (cols * k / 8));
    pool.parallel_for(rows, grain, [&](int64_t b, int64_t e) { fn(args, k, b, e); });
  } else {
    pool.parallel_for(rows / kT, 1, [&](int64_t b, int64_t e) { fn(args, k, b, e); });
  }
}

}  // namespace

std::string trellis_matvec_isa() { return kernel_family_name(best_family()); }

void trellis_matvec(const uint32_t* codes, const uint16_t* scales_f16, int64_t rows, int64_t cols,
                    int k, int axis, const float* x, int64_t n, float* y, ThreadPool& pool) {
  run(best_family(), codes, scales_f16, rows, cols, k, axis, x, n, y, pool);
}

namespace detail {

std::vector<std::string> trellis_matvec_isas() { return kernel_family_names(family_supported); }

void trellis_matvec_with(std::string_view isa, const uint32_t* codes, const uint16_t* scales_f16,
                         int64_t rows, int64_t cols, int k, int axis, const float* x, int64_t n,
                         float* y, ThreadPool& pool) {
  run(kernel_family_named(isa, family_supported, "trellis_matvec"), codes, scales_f16, rows, cols,
      k, axis, x, n, y, pool);
}

}  // namespace detail

}  // namespace hearth::cpu
