// matmul dispatcher: picks the kernel family once (CPU features + AMX permission), packs x into
// thread-local scratch, and splits the output columns statically across the pool so each thread
// streams a disjoint slice of the weights. Also holds the portable scalar kernel, which the
// compiler auto-vectorises for baseline x86-64 and which every other path is tested against.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstdint>
#include <string>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "backend/cpu/matmul_kernels.h"
#include "core/buffer.h"

namespace hearth::cpu {
namespace detail {

namespace {

#if defined(__x86_64__)
// CPUID bit `bit` of register `reg` (0 eax, 1 ebx, 2 ecx, 3 edx) of leaf/subleaf; false when the
// CPU lacks the leaf.
bool cpuid_bit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned r[4] = {};
  if (!__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1;
}

// The register state the OS saves on context switches (XCR0): a feature the CPU has is usable
// only when the OS also saves its registers.
uint64_t os_saved_state() {
  if (!cpuid_bit(1, 0, 2, 27)) return 0;  // OSXSAVE: xgetbv is available
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}
#endif

// Read from CPUID rather than __builtin_cpu_supports, whose feature names differ between
// compilers (clang 14 knows neither "f16c" nor the AMX ones).
bool cpu_has(const char* feature) {
#if defined(__x86_64__)
  const std::string f = feature;
  const uint64_t xcr0 = os_saved_state();
  const bool avx_state = (xcr0 & 0x6) == 0x6;                    // SSE and AVX registers
  const bool avx512_state = avx_state && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM halves
  const bool avx2 = avx_state && cpuid_bit(7, 0, 1, 5) && cpuid_bit(1, 0, 2, 12) &&  // avx2, fma
                    cpuid_bit(1, 0, 2, 29);                                          // f16c
  if (f == "avx2") return avx2;
  const bool avx512 = avx2 && avx512_state && cpuid_bit(7, 0, 1, 16) &&  // avx512f
                      cpuid_bit(7, 0, 1, 30) && cpuid_bit(7, 0, 1, 31);  // avx512bw, avx512vl
  if (f == "avx512") return avx512;
  // AMX tile state (XCR0 bits 17-18) is granted per process later by amx_request_permission.
  if (f == "amx")
    return avx512 && cpuid_bit(7, 0, 3, 24) && cpuid_bit(7, 0, 3, 22) &&  // amx-tile, amx-bf16
           cpuid_bit(7, 1, 0, 5);                                         // avx512bf16
#endif
  (void)feature;
  return false;
}

struct IsaTable {
  bool avx2, avx512, amx;
};

const IsaTable& isa_table() {
  static const IsaTable t = [] {
    IsaTable r{};
    r.avx2 = cpu_has("avx2");
    r.avx512 = r.avx2 && cpu_has("avx512");
    r.amx = r.avx512 && cpu_has("amx") && amx_request_permission();
    return r;
  }();
  return t;
}

// Per calling thread, so concurrent matmuls on different pools never share scratch.
Buffer& scratch() {
  thread_local Buffer buffer;
  return buffer;
}

float* scratch_floats(size_t count) {
  Buffer& b = scratch();
  if (b.size() < count * sizeof(float)) b.reserve(count * sizeof(float) + (1 << 16));
  return static_cast<float*>(b.data());
}

// Below this many rows of x the AVX-512 kernels win (and bf16 rounding of the tile path buys
// nothing); above it AMX tiles do. Measured with bench_matmul on Sapphire Rapids.
constexpr int64_t kAmxMinRows = 16;

// From this many rows of x the AVX-512 GEMM (matmul_avx512_gemm.cpp) beats the row kernels,
// which run out of registers past 4 rows.
constexpr int64_t kGemmMinRows = 12;

// Splits [0, total) into n_parts ranges whose boundaries are multiples of `align`.
inline std::pair<int64_t, int64_t> split(int64_t total, int part, int n_parts, int64_t align) {
  int64_t units = (total + align - 1) / align;
  int64_t b = units * part / n_parts * align, e = units * (part + 1) / n_parts * align;
  return {std::min(b, total), std::min(e, total)};
}

}  // namespace

MatmulIsa matmul_best_isa() {
  const IsaTable& t = isa_table();
  return t.amx      ? MatmulIsa::Amx
         : t.avx512 ? MatmulIsa::Avx512
         : t.avx2   ? MatmulIsa::Avx2
                    : MatmulIsa::Generic;
}

bool matmul_isa_supported(MatmulIsa isa) {
  const IsaTable& t = isa_table();
  switch (isa) {
    case MatmulIsa::Generic:
      return true;
    case MatmulIsa::Avx2:
      return t.avx2;
    case MatmulIsa::Avx512:
      return t.avx512;
    case MatmulIsa::Amx:
      return t.amx;
  }
  return false;
}

const char* matmul_isa_name(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::Generic:
      return "generic";
    case MatmulIsa::Avx2:
      return "avx2";
    case MatmulIsa::Avx512:
      return "avx512";
    case MatmulIsa::Amx:
      return "amx";
  }
  return "?";
}

void pack_x(float* xp, const float* x, int64_t k, int64_t kpad, int64_t r_begin, int64_t r_end,
            int chunk) {
  for (int64_t r = r_begin; r < r_end; ++r) {
    const float* src = x + r * k;
    float* dst = xp + r * kpad;
    if (chunk == 0) {
      std::copy(src, src + k, dst);
      std::fill(dst + k, dst + kpad, 0.0f);
      continue;
    }
    // Within each chunk: even elements first, then odd ones (matching the weight split).
    const int half = chunk / 2;
    for (int64_t c = 0; c < kpad; c += chunk) {
      for (int i = 0; i < half; ++i) {
        int64_t ke = c + 2 * i, ko = ke + 1;
        dst[c + i] = ke < k ? src[ke] : 0.0f;
        dst[c + half + i] = ko < k ? src[ko] : 0.0f;
      }
    }
  }
}

// Portable kernel: 8 independent f32 partial sums per (row, token) so the compiler can
// vectorise, four weight rows at a time so x is reused from registers/L1.
void matmul_rows_generic(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  constexpr int L = 8;
  const int64_t k = a.k;
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t j = 0; j < a.n; ++j) {
      const float* xr = a.x + j * k;
      float acc[L] = {};
      int64_t i = 0;
      switch (a.w_dtype) {
        case DType::BF16: {
          const uint16_t* wr = static_cast<const uint16_t*>(a.w) + o * k;
          for (; i + L <= k; i += L)
            for (int l = 0; l < L; ++l) acc[l] += bf16_to_f32(wr[i + l]) * xr[i + l];
          for (; i < k; ++i) acc[0] += bf16_to_f32(wr[i]) * xr[i];
          break;
        }
        case DType::F16: {
          const uint16_t* wr = static_cast<const uint16_t*>(a.w) + o * k;
          for (; i + L <= k; i += L)
            for (int l = 0; l < L; ++l) acc[l] += f16_to_f32(wr[i + l]) * xr[i + l];
          for (; i < k; ++i) acc[0] += f16_to_f32(wr[i]) * xr[i];
          break;
        }
        default: {
          const void* wr = static_cast<const char*>(a.w) + o * k * 4;
          for (; i + L <= k; i += L)
            for (int l = 0; l < L; ++l) acc[l] += load_scalar(wr, DType::F32, i + l) * xr[i + l];
          for (; i < k; ++i) acc[0] += load_scalar(wr, DType::F32, i) * xr[i];
          break;
        }
      }
      float s = 0.0f;
      for (int l = 0; l < L; ++l) s += acc[l];
      a.y[j * a.out + o] = s + bias_at(a, o);
    }
  }
}

void matmul_with(MatmulIsa isa, const Tensor& y, const Tensor& x, const Tensor& w,
                 const Tensor& bias, ThreadPool& pool, bool batch_invariant) {
  MatmulArgs a;
  a.y = y.as<float>();
  a.x = x.as<const float>();
  a.w = w.data;
  a.w_dtype = w.dtype;
  a.bias = bias.empty() ? nullptr : bias.data;
  a.bias_dtype = bias.dtype;
  a.n = x.rows();
  a.k = x.cols();
  a.kpad = (a.k + 31) / 32 * 32;
  a.out = w.rows();
  if (a.n == 0 || a.out == 0) return;
  const int n_threads = pool.size();

  if (isa == MatmulIsa::Amx && w.dtype == DType::BF16 && a.n >= kAmxMinRows && !batch_invariant) {
    Buffer& b = scratch();
    size_t need = amx_packed_x_bytes(a.n, a.k);
    if (b.size() < need) b.reserve(need + (1 << 16));
    auto* packed = static_cast<uint16_t*>(b.data());
    pool.run([&](int t, int nt) {
      auto [r0, r1] = split(a.n, t, nt, 16);
      if (r0 < r1) amx_pack_x(packed, a.x, a.n, a.k, r0, r1);
    });
    pool.run([&](int t, int nt) {
      auto [o0, o1] = split(a.out, t, nt, 32);
      if (o0 < o1) matmul_cols_amx(a, packed, o0, o1);
    });
    return;
  }
  if (isa == MatmulIsa::Amx) isa = MatmulIsa::Avx512;
  if (isa == MatmulIsa::Avx512 && a.n >= kGemmMinRows && !batch_invariant) {
    pool.run([&](int t, int nt) {
      auto [o0, o1] = split(a.out, t, nt, 64);
      if (o0 < o1) matmul_cols_avx512_gemm(a, o0, o1);
    });
    return;
  }

  void (*kernel)(const MatmulArgs&, int64_t, int64_t) = matmul_rows_generic;
  int chunk = 0;
  if (isa == MatmulIsa::Avx512) {
    kernel = matmul_rows_avx512;
    chunk = 32;
  } else if (isa == MatmulIsa::Avx2) {
    kernel = matmul_rows_avx2;
    chunk = 16;
  }
  if (kernel != matmul_rows_generic) {
    float* xp = scratch_floats(size_t(a.n * a.kpad));
    const int c = a.w_dtype == DType::BF16 ? chunk : 0;
    // Packing is tiny next to the weight stream; parallelise it only when x is big.
    if (a.n * a.k >= (1 << 16) && n_threads > 1) {
      pool.parallel_for(a.n, 1,
                        [&](int64_t r0, int64_t r1) { pack_x(xp, a.x, a.k, a.kpad, r0, r1, c); });
    } else {
      pack_x(xp, a.x, a.k, a.kpad, 0, a.n, c);
    }
    a.xp = xp;
  }
  if (n_threads == 1) {
    kernel(a, 0, a.out);
    return;
  }
  pool.run([&](int t, int nt) {
    auto [o0, o1] = split(a.out, t, nt, 16);
    if (o0 < o1) kernel(a, o0, o1);
  });
}

}  // namespace detail

void matmul(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, ThreadPool& pool,
            bool batch_invariant) {
  static const detail::MatmulIsa best = detail::matmul_best_isa();
  detail::matmul_with(best, y, x, w, bias, pool, batch_invariant);
}

std::string matmul_isa() {
  switch (detail::matmul_best_isa()) {
    case detail::MatmulIsa::Amx:
      return "avx512+amx-bf16";
    case detail::MatmulIsa::Avx512:
      return "avx512";
    case detail::MatmulIsa::Avx2:
      return "avx2+fma";
    case detail::MatmulIsa::Generic:
      return "generic";
  }
  return "generic";
}

}  // namespace hearth::cpu
