// The decode GEMV's bf16 instances and its launchers for every format (the kernel and the work
// split: gemv_kernel.cuh; the formats: gemv_formats.cuh; the packed formats' instances:
// gemv_affine.cu, gemv_trellis.cu, compiled apart so that the three build in parallel).
//
// Five other designs were built, run on the H200 and removed as slower than this one (bulk
// copies, tensor cores, a cp.async ring, an even split of row pieces, f32 input / no preload):
// docs/design-notes.md, "Decode GEMV designs measured and removed".
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/gemv_formats.cuh"

namespace hearth::cuda {

namespace {

using gemv::Args;

// The warps per SM the row split aims for: with the input norm and residual folded in, a split
// aiming at 48 warps per SM beat 32, 64, 96 and 128 on the 8B (211.6 t/s against 206.4 at 64)
// and matched 64 on the 0.6B and the 9B (design-notes.md, "Measured and rejected").
constexpr int kWarpsPerSm = 48;

gemv::Mat mat(const GemvWeight& w) { return {w.w, w.scales, w.biases}; }

Args make_args(const Ten& x, const GemvWeight& w, const GemvNorm& norm) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n = int32_t(x.rows());
  a.group = w.group;
  a.param_dt = w.param_dt;
  if (!norm.w.empty()) {
    a.norm_w = norm.w.p;
    a.norm_wdt = norm.w.dtype;
    a.norm_eps = norm.eps;
    a.norm_offset = norm.offset;
  }
  return a;
}

template <bool GLU>
void launch_format(Ctx& ctx, Args& a, const GemvWeight& w, int64_t total_rows) {
  if (a.n < 1 || a.n > 8) cuda_fail("gemv", "more than 8 activation rows", __FILE__, __LINE__);
  if (w.format == kPackedAffine)
    gemv::launch_affine(ctx, a, total_rows, w.bits, GLU);
  else if (w.format == kPackedTrellis)
    gemv::launch_trellis(ctx, a, total_rows, w.bits, GLU);
  else
    gemv::launch<gemv::Bf16Rows, GLU>(ctx, a, total_rows);
  HEARTH_CUDA_LAUNCHED();
}

template <int N>
void allow_bf16_norm_smem() {
  gemv::allow_norm_smem<gemv::Bf16Rows, N>();
}

}  // namespace

// Warps per row: enough warps in flight to cover the memory latency on every SM (the
// kWarpsPerSm target), while each lane still gets at least two units (16-byte loads for bf16).
int gemv_split(const Ctx& ctx, int64_t rows, int64_t units) {
  const int64_t target = int64_t(ctx.sm_count) * kWarpsPerSm;
  int split = 1;
  while (split < gemv::kWarps && rows * split < target && units / (split * 2) >= 32 * 2) split *= 2;
  return split;
}

// Blocks of one kernel variant that fit on an SM with `smem` bytes of dynamic shared memory,
// measured once per (kernel, smem) — outside the hot path, and allowed during graph capture.
int gemv_resident_blocks(const void* kernel, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = known.try_emplace({kernel, smem}, 1);
  if (fresh) {
    int b = 0;
    HEARTH_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, gemv::kWarps * 32, smem));
    it->second = std::max(b, 1);
  }
  return it->second;
}

void gemv_init() {
  allow_bf16_norm_smem<1>();
  allow_bf16_norm_smem<2>();
  allow_bf16_norm_smem<3>();
  allow_bf16_norm_smem<4>();
  allow_bf16_norm_smem<5>();
  allow_bf16_norm_smem<6>();
  allow_bf16_norm_smem<7>();
  allow_bf16_norm_smem<8>();
  gemv::affine_init();
  gemv::trellis_init();
}

bool gemv_fits(const Ten& x, const Ten& w) {
  return x.rows() <= 8 && x.dtype == kBF16 && w.dtype == kBF16 && w.ndim == 2 &&
         x.cols() == w.d[1] && x.cols() % 8 == 0 && aligned16(x.p) && aligned16(w.p);
}

// Affine: the bits the kernels are instantiated for, groups of whole 32-code chunks (so a
// chunk's BITS words load with vectors as wide as its alignment allows). Trellis: rows of
// whole 256-weight blocks.
bool gemv_fits(const Ten& x, const PackedTen& w) {
  if (x.rows() > 8 || x.dtype != kBF16 || x.cols() != w.in || w.in % 8 != 0 || !aligned16(x.p) ||
      !aligned16(w.codes))
    return false;
  if (w.format == kPackedAffine)
    return w.bits >= 2 && w.bits <= 8 && w.bits != 7 && w.group > 0 && w.group % 32 == 0 &&
           w.in % w.group == 0;
  return w.format == kPackedTrellis && w.axis == 1 && w.bits >= 2 && w.bits <= 4 &&
         w.in % kTrellisBlock == 0;
}

bool gemv_norm_fits(const Ten& x, const Ten& norm_w) {
  return norm_w.numel() == x.cols() && size_t(x.numel()) * 2 <= gemv::kMaxNormBytes;
}

void gemv_many(Ctx& ctx, const Ten& x, const GemvJobs& jobs, const GemvNorm& norm) {
  Args a = make_args(x, jobs.w[0], norm);
  a.n_seg = jobs.n;
  int64_t total = 0;
  for (int i = 0; i < jobs.n; ++i) {
    gemv::Seg& s = a.seg[i];
    s.m = mat(jobs.w[i]);
    s.y = jobs.y[i].p;
    s.ydt = jobs.y[i].dtype;
    s.bias = jobs.bias[i].p;
    s.bdt = jobs.bias[i].dtype;
    s.rows = jobs.w[i].out;
    total += s.rows;
  }
  launch_format<false>(ctx, a, jobs.w[0], total);
}

void gemv_one(Ctx& ctx, const Ten& y, const Ten& x, const GemvWeight& w, const Ten& bias) {
  GemvJobs jobs;
  jobs.y[0] = y;
  jobs.w[0] = w;
  jobs.bias[0] = bias;
  jobs.n = 1;
  gemv_many(ctx, x, jobs, GemvNorm{});
}

void gemv_residual(Ctx& ctx, const Ten& resid, float scale, const Ten& x, const GemvWeight& w,
                   const Ten& bias, int32_t product_dtype) {
  Args a = make_args(x, w, GemvNorm{});
  a.n_seg = 1;
  gemv::Seg& s = a.seg[0];
  s.m = mat(w);
  s.ydt = product_dtype;
  s.bias = bias.p;
  s.bdt = bias.dtype;
  s.resid = resid.p;
  s.rdt = resid.dtype;
  s.rscale = scale;
  s.rows = w.out;
  launch_format<false>(ctx, a, w, s.rows);
}

void gemv_glu(Ctx& ctx, const Ten& y, const Ten& x, const GemvWeight& gate, const Ten& gate_bias,
              const GemvWeight& up, const Ten& up_bias, int32_t act, const GemvNorm& norm) {
  Args a = make_args(x, gate, norm);
  a.n_seg = 1;
  a.act = act;
  gemv::Seg& s = a.seg[0];
  s.m = mat(gate);
  s.m2 = mat(up);
  s.y = y.p;
  s.ydt = y.dtype;
  s.bias = gate_bias.p;
  s.bdt = gate_bias.dtype;
  s.bias2 = up_bias.p;
  s.bdt2 = up_bias.dtype;
  s.rows = gate.out;
  launch_format<true>(ctx, a, gate, s.rows);
}

}  // namespace hearth::cuda
