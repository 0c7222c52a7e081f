// Affine decode dispatcher: converts the scales and biases of the whole matrix to f32 once per
// call (so the kernels never convert per weight), lays x out for the kernels (4-bit: each
// 32-chunk as [even | odd] codes' inputs) and splits the output rows across the pool. The
// kernels are in affine_matvec_kernels.h, built for baseline x86-64 here and for AVX2 /
// AVX-512 in their own files.
#include "backend/cpu/affine_matvec.h"

#include <algorithm>

#include "backend/cpu/kernel_family.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "quant/affine.h"
// Last: its templates compile for this file's (baseline) ISA.
#include "backend/cpu/affine_matvec_kernels.h"

namespace hearth::cpu {

namespace affine {
void rows_generic(const Args& a, int64_t begin, int64_t end) { rows<GenericOps>(a, begin, end); }
void dequantize_generic(const Args& a, int64_t begin, int64_t end, float* out) {
  dequantize<GenericOps>(a, begin, end, out);
}
}  // namespace affine

namespace {

using Family = KernelFamily;

bool family_supported(Family f) {
  using detail::MatmulIsa;
#if defined(__x86_64__)
  const bool bmi2 = __builtin_cpu_supports("bmi2");
  if (f == Family::Avx512) return detail::matmul_isa_supported(MatmulIsa::Avx512) && bmi2;
  if (f == Family::Avx2) return detail::matmul_isa_supported(MatmulIsa::Avx2) && bmi2;
#endif
  return f == Family::Generic;
}

Family best_family() {
  static const Family best = best_kernel_family(family_supported);
  return best;
}

using RowsFn = void (*)(const affine::Args&, int64_t, int64_t);

RowsFn pick(Family f) {
  switch (f) {
    case Family::Avx512:
      return affine::rows_avx512;
    case Family::Avx2:
      return affine::rows_avx2;
    default:
      return affine::rows_generic;
  }
}

void check_format(const Tensor& w) {
  const int bits = w.packed.bits, group = w.packed.group_size;
  if (!quant::affine_bits_supported(bits) || !quant::affine_group_size_supported(group) ||
      w.cols() % group != 0)
    fail(
        "affine weight {} has bits {} and group {} (bits 2-6 or 8, groups 32, 64, 128 dividing "
        "the row)",
        w.describe(), bits, group);
}

void run(Family f, const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool) {
  check_format(w);
  const int64_t n = x.rows(), in = w.cols(), out = w.rows();
  const int bits = w.packed.bits, group = w.packed.group_size;
  if (x.cols() != in || y.numel() != n * out)
    fail("affine matvec shapes: y {} = x {} · w {}ᵀ", y.describe(), x.describe(), w.describe());
  if (n <= 0) return;

  // Per calling thread, grown once: f32 scales and biases, and x in the kernels' order.
  thread_local std::vector<float> scales, biases, xs;
  const int64_t params = out * (in / group);
  if (scales.size() < size_t(params)) scales.resize(size_t(params)), biases.resize(size_t(params));
  const size_t param_size = dtype_size(w.packed.param_dtype);
  // The pool's threads see their own thread_locals: hand them this thread's buffers.
  float* scales_f32 = scales.data();
  float* biases_f32 = biases.data();
  pool.parallel_for(out, 256, [&](int64_t r0, int64_t r1) {
    const int64_t g = in / group;
    quant::affine_params_to_f32(static_cast<const char*>(w.packed.scales) + r0 * g * param_size,
                                w.packed.param_dtype, (r1 - r0) * g, scales_f32 + r0 * g);
    quant::affine_params_to_f32(static_cast<const char*>(w.packed.biases) + r0 * g * param_size,
                                w.packed.param_dtype, (r1 - r0) * g, biases_f32 + r0 * g);
  });
  const float* xp = x.as<const float>();
  if (bits == 4) {
    if (xs.size() < size_t(n * in)) xs.resize(size_t(n * in));
    for (int64_t i = 0; i < n * in; i += 32)
      for (int j = 0; j < 16; ++j) {
        xs[size_t(i + j)] = xp[i + 2 * j];
        xs[size_t(i + 16 + j)] = xp[i + 2 * j + 1];
      }
    xp = xs.data();
  }
  const affine::Args args{
      w.as<const uint32_t>(), scales_f32, biases_f32, out, in, bits, group, n, xp, y.as<float>()};
  const RowsFn fn = pick(f);
  // ~32 KiB of codes per task at least, so small matrices stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (32 << 10) / (in * bits / 8));
  pool.parallel_for(out, grain, [&](int64_t b, int64_t e) { fn(args, b, e); });
}

}  // namespace

void affine_dequantize_rows(const Tensor& w, int64_t r0, int64_t r1, float* out) {
  check_format(w);
  const int64_t in = w.cols(), groups = in / w.packed.group_size;
  const size_t param_size = dtype_size(w.packed.param_dtype);
  thread_local std::vector<float> scales, biases;
  scales.resize(size_t((r1 - r0) * groups));
  biases.resize(scales.size());
  quant::affine_params_to_f32(static_cast<const char*>(w.packed.scales) + r0 * groups * param_size,
                              w.packed.param_dtype, (r1 - r0) * groups, scales.data());
  quant::affine_params_to_f32(static_cast<const char*>(w.packed.biases) + r0 * groups * param_size,
                              w.packed.param_dtype, (r1 - r0) * groups, biases.data());
  // Rows indexed from r0: the codes pointer moves to r0 as well.
  const affine::Args args{
      w.as<const uint32_t>() + r0 * quant::affine_words_per_row(in, w.packed.bits),
      scales.data(),
      biases.data(),
      r1 - r0,
      in,
      w.packed.bits,
      w.packed.group_size,
      0,
      nullptr,
      nullptr};
  switch (best_family()) {
    case Family::Avx512:
      return affine::dequantize_avx512(args, 0, r1 - r0, out);
    case Family::Avx2:
      return affine::dequantize_avx2(args, 0, r1 - r0, out);
    default:
      return affine::dequantize_generic(args, 0, r1 - r0, out);
  }
}

void affine_matvec(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool) {
  run(best_family(), y, x, w, pool);
}

std::string affine_matvec_isa() { return kernel_family_name(best_family()); }

namespace detail {

std::vector<std::string> affine_matvec_isas() { return kernel_family_names(family_supported); }

void affine_matvec_with(std::string_view isa, const Tensor& y, const Tensor& x, const Tensor& w,
                        ThreadPool& pool) {
  run(kernel_family_named(isa, family_supported, "affine_matvec"), y, x, w, pool);
}

}  // namespace detail
}  // namespace hearth::cpu
