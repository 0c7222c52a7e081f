// Affine decode dispatcher: converts the scales and biases of the whole matrix to f32 once per
// call (so the kernels never convert per weight), lays x out for the kernels and splits the
// output rows across the pool. 4-bit weights with rows of whole 64-input pairs run on
// int8 activations (affine_int8_kernels.h) where the CPU has AVX2; everything else runs the f32
// kernels of affine_matvec_kernels.h (4-bit: x's 32-chunks as [even | odd] codes' inputs), built
// for baseline x86-64 here and for AVX2 / AVX-512 in their own files.
#include "backend/cpu/affine_matvec.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernel_family.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "quant/affine.h"
// Last: its templates compile for this file's (baseline) ISA.
#include "backend/cpu/affine_int8_kernels.h"
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

// The int8-activation kernels, best first; None: the f32 kernels.
enum class Int8Kernel { Avx512Vnni, AvxVnni, Avx2, None };
constexpr const char* kInt8Names[] = {"avx512vnni", "avxvnni", "avx2"};

bool has_avx_vnni() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;  // CPUID.(EAX=7, ECX=1):EAX bit 4
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
#else
  return false;
#endif
}

bool int8_supported(Int8Kernel k, int bits) {
  using detail::MatmulIsa;
  if (bits != 4) return false;  // 8 bits: the activations' rounding would dominate the error
#if defined(__x86_64__)
  if (!detail::matmul_isa_supported(MatmulIsa::Avx2)) return false;  // AVX2 and FMA, OS-enabled
  if (k == Int8Kernel::Avx512Vnni)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
  if (k == Int8Kernel::AvxVnni) return has_avx_vnni();
  if (k == Int8Kernel::Avx2) return true;
#endif
  (void)k;
  return false;
}

Int8Kernel best_int8(int bits) {
  static const Int8Kernel best = [] {
    for (Int8Kernel k : {Int8Kernel::Avx512Vnni, Int8Kernel::AvxVnni, Int8Kernel::Avx2})
      if (int8_supported(k, 4)) return k;
    return Int8Kernel::None;
  }();
  return bits == 4 ? best : Int8Kernel::None;
}

using Int8RowsFn = void (*)(const affine_int8::Args&, int64_t, int64_t);

// More input rows than this go through the int8 GEMM (where the CPU has one) rather than the
// decode kernels, which stream W once per 8 input rows.
constexpr int64_t kDirectRows = 8;

affine_int8::ParamType int8_param_type(DType d) {
  if (d == DType::F32) return affine_int8::ParamType::F32;
  if (d == DType::BF16) return affine_int8::ParamType::BF16;
  if (d == DType::F16) return affine_int8::ParamType::F16;
  fail("affine scales and biases must be F32, F16 or BF16, got {}", dtype_name(d));
}

Int8RowsFn pick_int8(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::Avx512Vnni:
      return affine_int8::rows_avx512vnni;
    case Int8Kernel::AvxVnni:
      return affine_int8::rows_avxvnni;
    default:
      return affine_int8::rows_avx2;
  }
}

// x [n, cols] as the int8 kernels read it (affine_int8_kernels.h): per 32 inputs,
// dx = max|x| / 127 and xq = round(x / dx) (|xq| ≤ 127; an all-zero block gives dx = 0, xq = 0);
// the 4-bit layout pairs blocks; Σ x per group from f32 x.
struct Int8Activations {
  std::vector<int8_t> xq;
  std::vector<float> xdx, gsum;
};

// Rounds to the nearest integer (ties to even) for |v| < 2^22 without a libm call, so the loops
// below vectorise: adding 1.5·2^23 leaves the rounded value in the low mantissa bits.
inline int8_t round_to_int8(float v) {
  constexpr float kMagic = 12582912.0f;
  return int8_t(int32_t((v + kMagic) - kMagic));
}

// paired: the decode kernels' layout (4-bit blocks in pairs, even and odd inputs apart);
// otherwise natural order with one dx per block, for the GEMM. Rows spread over the pool when
// there are more than 8.

void quantize_activations(const float* x, int64_t n, int64_t cols, int bits, int group, bool paired,
                          Int8Activations& q, ThreadPool& pool) {
  const int64_t blocks = cols / 32, pairs = cols / 64, groups = cols / group;
  q.xq.resize(size_t(n * cols));
  paired = paired && bits == 4;
  q.xdx.resize(size_t(paired ? n * pairs * 8 : n * blocks));
  q.gsum.resize(size_t(n * groups));
  int8_t* xq = q.xq.data();
  float* xdx = q.xdx.data();
  float* gsum = q.gsum.data();
  auto rows = [&](int64_t t0, int64_t t1) {
    if (!paired) {  // the GEMM's layout, whose callers have AVX512-VNNI
      affine_int8::quantize_blocks_avx512(x, cols, t0, t1, xq, xdx);
    } else {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t b = 0; b < blocks; ++b) {
          const float* xb = x + t * cols + b * 32;
          float amax = 0;
          for (int i = 0; i < 32; ++i) {
            const float a = std::fabs(xb[i]);
            amax = a > amax ? a : amax;
          }
          const float dx = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
          const int64_t p = b / 2, half = b % 2;
          int8_t* dst = xq + t * cols + p * 64 + half * 16;
          for (int j = 0; j < 16; ++j) {
            dst[j] = round_to_int8(xb[2 * j] * inv);
            dst[32 + j] = round_to_int8(xb[2 * j + 1] * inv);
          }
          std::fill_n(xdx + (t * pairs + p) * 8 + half * 4, 4, dx);
        }
    }
    // Σ x per group as 16 running sums (lane j: inputs j, j + 16, ...) added in lane order: the
    // same additions on every ISA and path (the compiler vectorises the lanes without
    // reassociating), and no 4-cycle add chain per input.
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t g = 0; g < groups; ++g) {
        const float* xg = x + t * cols + g * group;
        float lane[16] = {};
        for (int64_t i = 0; i < group; i += 16)
          for (int j = 0; j < 16; ++j) lane[j] += xg[i + j];
        float sum = 0;
        for (int j = 0; j < 16; ++j) sum += lane[j];
        gsum[t * groups + g] = sum;
      }
  };
  // Decode's few rows stay on this thread; prefill's are spread over the pool.
  if (n <= 8)
    rows(0, n);
  else
    pool.parallel_for(n, 4, rows);
}

// The int8 kernels' arguments for n input rows of w, x rounded into q, writing y [n, out].
affine_int8::Args int8_args(const Tensor& w, int64_t n, const Int8Activations& q, float* y) {
  return affine_int8::Args{reinterpret_cast<const uint8_t*>(w.data),
                           w.packed.scales,
                           w.packed.biases,
                           int8_param_type(w.packed.param_dtype),
                           w.rows(),
                           w.cols(),
                           w.packed.bits,
                           w.packed.group_size,
                           n,
                           q.xq.data(),
                           q.xdx.data(),
                           q.gsum.data(),
                           y};
}

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

void run(Family f, Int8Kernel k8, const Tensor& y, const Tensor& x, const Tensor& w,
         ThreadPool& pool, bool allow_gemm = true) {
  check_format(w);
  const int64_t n = x.rows(), in = w.cols(), out = w.rows();
  const int bits = w.packed.bits, group = w.packed.group_size;
  if (x.cols() != in || y.numel() != n * out)
    fail("affine matvec shapes: y {} = x {} · w {}ᵀ", y.describe(), x.describe(), w.describe());
  if (n <= 0) return;

  // ~32 KiB of codes per task at least, so small matrices stay on one thread.
  const int64_t grain = std::max<int64_t>(1, (32 << 10) / (in * bits / 8));
  // The int8 kernels read the scales and biases in their stored dtype.
  if (k8 != Int8Kernel::None && int8_supported(k8, bits) && in % 64 == 0) {
    thread_local Int8Activations q;
    const bool gemm = allow_gemm && n > kDirectRows && k8 == Int8Kernel::Avx512Vnni;
    quantize_activations(x.as<const float>(), n, in, bits, group, !gemm, q, pool);
    const affine_int8::Args args = int8_args(w, n, q, y.as<float>());
    if (gemm) {  // tiles of 32 output rows, each repacked once for all input rows
      pool.parallel_for((out + 31) / 32, 1, [&](int64_t b, int64_t e) {
        affine_int8::gemm_avx512vnni(args, b * 32, std::min(e * 32, out));
      });
      return;
    }
    const Int8RowsFn fn = pick_int8(k8);
    pool.parallel_for(out, grain, [&](int64_t b, int64_t e) { fn(args, b, e); });
    return;
  }
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

bool affine_glu(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up,
                Activation act, ThreadPool& pool) {
  const int64_t n = x.rows(), in = gate.cols(), out = gate.rows();
  const Int8Kernel k8 = best_int8(gate.packed.bits);
  if (gate.packed.format != WeightFormat::Affine || up.packed.format != WeightFormat::Affine ||
      n > kDirectRows || n <= 0 || k8 == Int8Kernel::None || best_int8(up.packed.bits) != k8 ||
      in % 64 != 0 || up.cols() != in || up.rows() != out ||
      up.packed.group_size != gate.packed.group_size ||
      up.packed.param_dtype != gate.packed.param_dtype || x.cols() != in || y.numel() != n * out)
    return false;
  check_format(gate);
  check_format(up);
  const int group = gate.packed.group_size;
  thread_local Int8Activations q;
  thread_local std::vector<float> g_out, u_out;  // [n, out] each; tasks write disjoint rows
  quantize_activations(x.as<const float>(), n, in, 4, group, true, q, pool);
  g_out.resize(size_t(n * out));
  u_out.resize(size_t(n * out));
  const affine_int8::Args ga = int8_args(gate, n, q, g_out.data()),
                          ua = int8_args(up, n, q, u_out.data());
  const Int8RowsFn fn = pick_int8(k8);
  float* yp = y.as<float>();
  const float* gp = g_out.data();
  const float* up_out = u_out.data();
  const int64_t grain = std::max<int64_t>(1, (16 << 10) / (in / 2));
  pool.parallel_for(out, grain, [&](int64_t b, int64_t e) {
    fn(ga, b, e);
    fn(ua, b, e);
    for (int64_t t = 0; t < n; ++t)
      glu_span(yp + t * out + b, gp + t * out + b, up_out + t * out + b, e - b, act);
  });
  return true;
}

bool affine_matvec_has_gemm(const Tensor& w) {
  return w.packed.format == WeightFormat::Affine && w.cols() % 64 == 0 &&
         best_int8(w.packed.bits) == Int8Kernel::Avx512Vnni;
}

void affine_matvec(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool,
                   bool allow_gemm) {
  run(best_family(), best_int8(w.packed.bits), y, x, w, pool, allow_gemm);
}

std::string affine_matvec_isa() { return kernel_family_name(best_family()); }

namespace detail {

std::vector<std::string> affine_matvec_isas() { return kernel_family_names(family_supported); }

void affine_matvec_with(std::string_view isa, const Tensor& y, const Tensor& x, const Tensor& w,
                        ThreadPool& pool) {
  run(kernel_family_named(isa, family_supported, "affine_matvec"), Int8Kernel::None, y, x, w, pool);
}

std::vector<std::string> affine_int8_isas(int bits) {
  std::vector<std::string> out;
  for (Int8Kernel k : {Int8Kernel::Avx512Vnni, Int8Kernel::AvxVnni, Int8Kernel::Avx2})
    if (int8_supported(k, bits)) out.push_back(kInt8Names[int(k)]);
  return out;
}

void affine_matvec_int8_with(std::string_view isa, const Tensor& y, const Tensor& x,
                             const Tensor& w, ThreadPool& pool) {
  for (Int8Kernel k : {Int8Kernel::Avx512Vnni, Int8Kernel::AvxVnni, Int8Kernel::Avx2})
    if (isa == kInt8Names[int(k)] && int8_supported(k, w.packed.bits)) {
      if (w.cols() % 64 != 0)
        fail("affine_matvec_int8: rows of {} are not 64-input pairs", w.cols());
      return run(best_family(), k, y, x, w, pool);
    }
  fail("affine_matvec_int8: kernel '{}' is unknown or not supported here for {} bits", isa,
       w.packed.bits);
}

}  // namespace detail
}  // namespace hearth::cpu
