// Decode products with packed weights: y[n, out] = x[n, in] · Wᵀ for n ≤ 8 bf16 input rows, the
// codes decoded in registers and never written out, f32 accumulation.
//
// - Affine (MLX): a lane takes a chunk of 32 codes (`bits` words, contiguous across the warp) and
//   one scale and bias; a code becomes 256 + q in one integer op (f32_256_plus), and per chunk
//   Σ(256 + q)·x and Σx give scale·Σq·x + bias·Σx.
// - Trellis, axis 1 (rows = outputs): a warp takes a 256-weight block, lane l symbols 8l..8l+7.
//   The block's 8k words are read one per lane and the two a lane's windows need come by
//   shuffle; the row's fp16 scale and 1/147.8 multiply the finished sum.
// - Trellis, axis 0 (stored transposed, coded along the outputs): a block of threads owns 256
//   outputs and a slice of the inputs; each warp adds x[i]·scale[i] times the decoded stored row
//   i into its lanes' 8 outputs, the warps meet in shared memory, and the slices' partial sums
//   are added in a fixed order by a second kernel (no atomics: the result does not depend on
//   scheduling).
// A row's work is split over 1-8 warps (row_split) so that small matrices still fill the GPU,
// and each lane keeps several loads in flight.
#include <algorithm>

#include "backend/cuda/packed_decode.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 8;
constexpr int kTrellisUnroll = 4;  // blocks whose words a lane loads before decoding them

__device__ __forceinline__ uint32_t ld_stream_u32(const uint32_t* p) {
  uint32_t r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ uint2 ld_stream_u64(const uint2* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// The `BITS` words of one 32-code affine chunk, with the widest loads its alignment allows (a
// chunk starts at a multiple of 4·BITS bytes).
template <int BITS>
__device__ __forceinline__ void load_chunk(const uint32_t* p, uint32_t (&w)[BITS]) {
  if constexpr (BITS % 4 == 0) {
#pragma unroll
    for (int i = 0; i < BITS / 4; ++i) {
      const uint4 v = ld_stream(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (BITS % 2 == 0) {
#pragma unroll
    for (int i = 0; i < BITS / 2; ++i) {
      const uint2 v = ld_stream_u64(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < BITS; ++i) w[i] = ld_stream_u32(p + i);
  }
}

// Code j of a chunk; j is a compile-time constant after unrolling, so are the shifts.
template <int BITS>
__device__ __forceinline__ uint32_t chunk_code(const uint32_t (&w)[BITS], int j) {
  const int bit = j * BITS, i = bit >> 5, sh = bit & 31;
  uint32_t v = w[i] >> sh;
  if (sh + BITS > 32) v |= w[i + 1] << (32 - sh);
  return v & ((1u << BITS) - 1u);
}

// Sums of the warps that share a row (consecutive warps: warp = row_in_block · split + part),
// written by the row's first warp: y[r, row] = sum · mult (+ bias).
template <int N>
__device__ __forceinline__ void finish_rows(const float (&acc)[N], int n, int split, int64_t row,
                                            bool live, float mult, const Ten& y, int64_t out,
                                            const void* bias, int bdt) {
  __shared__ float sums[kWarps][N];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) sums[warp][r] = v;
  }
  __syncthreads();
  if (!live || warp % split != 0 || lane >= n) return;
  float v = 0.0f;
  for (int p = 0; p < split; ++p) v += sums[warp + p][lane];
  v *= mult;
  if (bias) v += ld(bias, bdt, row);
  st(y.p, y.dtype, int64_t(lane) * out + row, v);
}

template <int BITS, int N>
__global__ void __launch_bounds__(kWarps * 32)
    affine_gemv_kernel(Ten y, const __nv_bfloat16* x, int n, PackedTen w, const void* bias, int bdt,
                       int split) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * (kWarps / split) + warp / split;
  const int part = warp % split;
  const bool live = row < w.out;
  const int64_t in = w.in, chunks = in / 32, groups = in / w.group;
  const int chunks_per_group = w.group / 32;
  float acc[N] = {};
  if (live) {
    const uint32_t* codes = w.codes + row * (in * BITS / 32);
#pragma unroll 2
    for (int64_t c = int64_t(part) * 32 + lane; c < chunks; c += int64_t(split) * 32) {
      uint32_t wd[BITS];
      load_chunk<BITS>(codes + c * BITS, wd);
      const int64_t g = row * groups + c / chunks_per_group;
      const float s = ld(w.scales, w.param_dt, g), b = ld(w.biases, w.param_dt, g);
      float sq[N] = {}, sx[N] = {};
#pragma unroll
      for (int q8 = 0; q8 < 4; ++q8) {
        float f[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = f32_256_plus(chunk_code<BITS>(wd, q8 * 8 + j));
#pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r >= n) break;
          float xv[8];
          bf16x8_to_f32(__ldg(reinterpret_cast<const uint4*>(x + r * in + c * 32 + q8 * 8)), xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            sq[r] = fmaf(f[j], xv[j], sq[r]);
            sx[r] += xv[j];
          }
        }
      }
#pragma unroll
      for (int r = 0; r < N; ++r) acc[r] += s * (sq[r] - 256.0f * sx[r]) + b * sx[r];
    }
  }
  finish_rows<N>(acc, n, split, row, live, 1.0f, y, w.out, bias, bdt);
}

// The 1MAD values of lane l's symbols 8l..8l+7 of a block whose word `lane` is `word` (lanes
// ≥ 8k hold nothing). Symbol 8l+7 has the lowest bit offset; the lane's windows span at most
// 7k + 12 + 24 < 64 bits, so two words hold them all. kBiased: trellis_1mad_biased's values.
template <int K, bool kBiased = false>
__device__ __forceinline__ void trellis_lane_values(uint32_t word, int lane, float (&v)[8]) {
  constexpr int kWords = kTrellisBlock * K / 32;
  const int low = (kTrellisBlock - 8 - 8 * lane) * K;
  const int w0 = low >> 5;
  const uint32_t a = __shfl_sync(0xffffffffu, word, w0);
  const uint32_t b = __shfl_sync(0xffffffffu, word, w0 + 1 == kWords ? 0 : w0 + 1);
  const int base = low & 31;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int rel = base + (7 - j) * K;  // < 32 always for k = 2 and 4
    const uint32_t lo = (K == 3 && rel >= 32) ? b : a;
    const uint32_t state = __funnelshift_r(lo, b, uint32_t(rel)) & 0xFFFu;
    v[j] = kBiased ? trellis_1mad_biased(state) : trellis_1mad(state);
  }
}

template <int K, int N>
__global__ void __launch_bounds__(kWarps * 32)
    trellis_rows_kernel(Ten y, const __nv_bfloat16* x, int n, PackedTen w, const void* bias,
                        int bdt, int split) {
  constexpr int kWords = kTrellisBlock * K / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * (kWarps / split) + warp / split;
  const int part = warp % split;
  const bool live = row < w.out;
  const int64_t in = w.in, blocks = in / kTrellisBlock;
  float acc[N] = {};
  if (live) {
    const uint32_t* codes = w.codes + row * blocks * kWords;
    for (int64_t b0 = part; b0 < blocks; b0 += int64_t(split) * kTrellisUnroll) {
      uint32_t words[kTrellisUnroll];
#pragma unroll
      for (int u = 0; u < kTrellisUnroll; ++u) {
        const int64_t b = b0 + int64_t(u) * split;
        words[u] = (lane < kWords && b < blocks) ? ld_stream_u32(codes + b * kWords + lane) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kTrellisUnroll; ++u) {
        const int64_t b = b0 + int64_t(u) * split;
        if (b >= blocks) break;  // uniform across the warp
        float v[8];
        trellis_lane_values<K>(words[u], lane, v);
#pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r >= n) break;
          float xv[8];
          bf16x8_to_f32(
              __ldg(reinterpret_cast<const uint4*>(x + r * in + b * kTrellisBlock + lane * 8)), xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] = fmaf(v[j], xv[j], acc[r]);
        }
      }
    }
  }
  const float mult = live ? ld(w.scales, kF16, row) / kTrellis1madScale : 0.0f;
  finish_rows<N>(acc, n, split, row, live, mult, y, w.out, bias, bdt);
}

// Trellis with one input row (the common decode case): the input is staged once per block in
// shared memory as f32 with its sum, so the inner loop reads four inputs per shared load,
// converts nothing, and subtracts the 1MAD offset once per row (1534 · Σx); the first weights
// are already in flight while the block stages x. Needs in · 4 bytes of shared memory. (The
// same staging for affine weights measured slower than reading x from L1: 203 against 223 t/s
// on the 8B shape, docs/QUANTIZATION.md.)
constexpr size_t kStageMax = 96 * 1024;

size_t stage_bytes(int64_t in) { return size_t(in) * 4 + 16; }

// Where float4 number p (x[4p .. 4p+3]) is staged, so that a warp's shared loads hit distinct
// banks: lanes take 8 values each of a 256-value block, so a block's even quads come first and
// its odd ones 32 later (lane l reads slots 64b + l and 64b + 32 + l).
__device__ __forceinline__ int64_t stage_slot(int64_t p) {
  return p / 64 * 64 + (p % 2) * 32 + p % 64 / 2;
}

// x as f32 in the layout above into xs, and *total = Σx.
__device__ __forceinline__ void stage_input(const __nv_bfloat16* x, int64_t in, float* xs,
                                            float* total) {
  float4* xs4 = reinterpret_cast<float4*>(xs);
  float mine = 0.0f;
  // Every thread runs the same passes (block_sum needs them all); past the end it adds 0.
  for (int64_t base = 0; base < in; base += int64_t(blockDim.x) * 8) {
    const int64_t i = base + int64_t(threadIdx.x) * 8;
    float f[8] = {};
    if (i < in) bf16x8_to_f32(*reinterpret_cast<const uint4*>(x + i), f);
    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) part += f[j];
    if (i < in) {
      xs4[stage_slot(i / 4)] = make_float4(f[0], f[1], f[2], f[3]);
      xs4[stage_slot(i / 4 + 1)] = make_float4(f[4], f[5], f[6], f[7]);
    }
    mine += part;
  }
  const float t = block_sum(mine);
  if (threadIdx.x == 0) *total = t;
  __syncthreads();
}

template <int K>
__global__ void __launch_bounds__(kWarps * 32)
    trellis_rows1_kernel(Ten y, const __nv_bfloat16* x, PackedTen w, const void* bias, int bdt,
                         int split) {
  constexpr int kWords = kTrellisBlock * K / 32;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * (kWarps / split) + warp / split;
  const int part = warp % split;
  const bool live = row < w.out;
  const int64_t in = w.in, blocks = in / kTrellisBlock;
  float* total = xs + in;
  const uint32_t* codes = w.codes + (live ? row : 0) * blocks * kWords;
  const int64_t step = int64_t(split) * kTrellisUnroll;
  auto load_batch = [&](int64_t b0, uint32_t(&words)[kTrellisUnroll]) {
#pragma unroll
    for (int u = 0; u < kTrellisUnroll; ++u) {
      const int64_t b = b0 + int64_t(u) * split;
      words[u] =
          (live && lane < kWords && b < blocks) ? ld_stream_u32(codes + b * kWords + lane) : 0u;
    }
  };
  uint32_t cur[kTrellisUnroll];
  load_batch(part, cur);
  stage_input(x, in, xs, total);
  float acc = 0.0f;
  if (live) {
    for (int64_t b0 = part; b0 < blocks; b0 += step) {
      uint32_t nxt[kTrellisUnroll];
      load_batch(b0 + step, nxt);
#pragma unroll
      for (int u = 0; u < kTrellisUnroll; ++u) {
        const int64_t b = b0 + int64_t(u) * split;
        if (b >= blocks) break;  // uniform across the warp
        float v[8];
        trellis_lane_values<K, true>(cur[u], lane, v);
        const float4* x4 = reinterpret_cast<const float4*>(xs) + b * 64 + lane;
        const float4 p = x4[0], q = x4[32];
        acc = fmaf(v[0], p.x, acc);
        acc = fmaf(v[1], p.y, acc);
        acc = fmaf(v[2], p.z, acc);
        acc = fmaf(v[3], p.w, acc);
        acc = fmaf(v[4], q.x, acc);
        acc = fmaf(v[5], q.y, acc);
        acc = fmaf(v[6], q.z, acc);
        acc = fmaf(v[7], q.w, acc);
      }
#pragma unroll
      for (int u = 0; u < kTrellisUnroll; ++u) cur[u] = nxt[u];
    }
  }
  // The row's first warp removes 1534 · Σx once: its parts together cover every block once.
  if (part == 0 && lane == 0) acc -= 1534.0f * *total;
  const float one[1] = {acc};
  const float mult = live ? ld(w.scales, kF16, row) / kTrellis1madScale : 0.0f;
  finish_rows<1>(one, 1, split, row, live, mult, y, w.out, bias, bdt);
}

// Block (output block ob, input slice s): partials[s][r][ob·256 + t] = Σ_{i in slice}
// x[r, i]·scale[i] · y_int(i, ob·256 + t), before the 1/147.8.
template <int K, int N>
__global__ void __launch_bounds__(kWarps * 32)
    trellis_cols_kernel(const __nv_bfloat16* x, int n, PackedTen w, float* partials, int slices) {
  constexpr int kWords = kTrellisBlock * K / 32;
  __shared__ float red[kWarps][kTrellisBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t ob = blockIdx.x, s = blockIdx.y, in = w.in, out = w.out;
  const int64_t oblocks = out / kTrellisBlock;
  const int64_t i0 = s * in / slices, i1 = (s + 1) * in / slices;
  float acc[N][8] = {};
  for (int64_t i = i0 + warp; i < i1; i += int64_t(kWarps) * kTrellisUnroll) {
    uint32_t words[kTrellisUnroll];
#pragma unroll
    for (int u = 0; u < kTrellisUnroll; ++u) {
      const int64_t r = i + int64_t(u) * kWarps;
      words[u] = (lane < kWords && r < i1)
                     ? ld_stream_u32(w.codes + (r * oblocks + ob) * kWords + lane)
                     : 0u;
    }
#pragma unroll
    for (int u = 0; u < kTrellisUnroll; ++u) {
      const int64_t r = i + int64_t(u) * kWarps;
      if (r >= i1) break;  // uniform across the warp
      float v[8];
      trellis_lane_values<K>(words[u], lane, v);
      const float sc = ld(w.scales, kF16, r);
#pragma unroll
      for (int q = 0; q < N; ++q) {
        if (q >= n) break;
        const float c = __bfloat162float(x[q * in + r]) * sc;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[q][j] = fmaf(c, v[j], acc[q][j]);
      }
    }
  }
#pragma unroll
  for (int q = 0; q < N; ++q) {
    if (q >= n) break;  // uniform across the block
#pragma unroll
    for (int j = 0; j < 8; ++j) red[warp][lane * 8 + j] = acc[q][j];
    __syncthreads();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) sum += red[k][threadIdx.x];
    partials[(s * n + q) * out + ob * kTrellisBlock + threadIdx.x] = sum;
    __syncthreads();
  }
}

__global__ void partials_sum_kernel(Ten y, const float* partials, int slices, int n, int64_t out,
                                    const void* bias, int bdt) {
  const int64_t total = int64_t(n) * out;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < slices; ++s) v += partials[int64_t(s) * total + i];
    v /= kTrellis1madScale;
    if (bias) v += ld(bias, bdt, i % out);
    st(y.p, y.dtype, i, v);
  }
}

// Input slices of a transposed trellis product: enough blocks for two waves of the GPU, each
// slice at least 64 inputs.
int cols_slices(const Ctx& ctx, const PackedTen& w) {
  const int64_t oblocks = w.out / kTrellisBlock;
  const int64_t want = (2 * int64_t(ctx.sm_count) + oblocks - 1) / oblocks;
  return int(std::max<int64_t>(1, std::min(want, w.in / 64)));
}

// Warps per output row (1-8): enough warps for kWarpsPerSm on every SM, as long as each warp
// keeps at least two passes of `per_pass` units.
constexpr int kWarpsPerSm = 48;
int row_split(const Ctx& ctx, int64_t rows, int64_t units, int64_t per_pass) {
  const int64_t target = int64_t(ctx.sm_count) * kWarpsPerSm;
  int split = 1;
  while (split < kWarps && rows * split < target && units / (split * 2) >= 2 * per_pass) split *= 2;
  return split;
}

// The single-row kernels' launch (their shared memory is allowed by packed_gemv_init).
template <auto Kernel>
void launch_staged(Ctx& ctx, const PackedTen& w, const Ten& y, const __nv_bfloat16* x,
                   const Ten& bias, int split) {
  const dim3 grid(unsigned((w.out + kWarps / split - 1) / (kWarps / split)));
  Kernel<<<grid, kWarps * 32, stage_bytes(w.in), ctx.stream>>>(y, x, w, bias.p, bias.dtype, split);
}

template <auto Kernel>
void allow_stage_smem() {
  HEARTH_CUDA_CHECK(
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStageMax)));
}

void launch_trellis_row(Ctx& ctx, const Ten& y, const __nv_bfloat16* x, const PackedTen& w,
                        const Ten& bias, int split) {
  switch (w.bits) {
    case 2:
      return launch_staged<trellis_rows1_kernel<2>>(ctx, w, y, x, bias, split);
    case 3:
      return launch_staged<trellis_rows1_kernel<3>>(ctx, w, y, x, bias, split);
    default:
      return launch_staged<trellis_rows1_kernel<4>>(ctx, w, y, x, bias, split);
  }
}

// The kernels for a weight's bits (checked by packed_gemv_fits), and their launches.
template <int N>
auto rows_kernel(const PackedTen& w) {
  if (w.format == kPackedAffine) {
    switch (w.bits) {
      case 2:
        return affine_gemv_kernel<2, N>;
      case 3:
        return affine_gemv_kernel<3, N>;
      case 4:
        return affine_gemv_kernel<4, N>;
      case 5:
        return affine_gemv_kernel<5, N>;
      case 6:
        return affine_gemv_kernel<6, N>;
      default:
        return affine_gemv_kernel<8, N>;
    }
  }
  switch (w.bits) {
    case 2:
      return trellis_rows_kernel<2, N>;
    case 3:
      return trellis_rows_kernel<3, N>;
    default:
      return trellis_rows_kernel<4, N>;
  }
}

template <int N>
auto cols_kernel(const PackedTen& w) {
  switch (w.bits) {
    case 2:
      return trellis_cols_kernel<2, N>;
    case 3:
      return trellis_cols_kernel<3, N>;
    default:
      return trellis_cols_kernel<4, N>;
  }
}

template <int N>
void launch_rows(Ctx& ctx, const Ten& y, const __nv_bfloat16* x, int n, const PackedTen& w,
                 const Ten& bias, int split) {
  const dim3 grid(unsigned((w.out + kWarps / split - 1) / (kWarps / split)));
  rows_kernel<N>(w)<<<grid, kWarps * 32, 0, ctx.stream>>>(y, x, n, w, bias.p, bias.dtype, split);
}

template <int N>
void launch_cols(Ctx& ctx, const __nv_bfloat16* x, int n, const PackedTen& w, float* partials,
                 int slices) {
  const dim3 grid(unsigned(w.out / kTrellisBlock), unsigned(slices));
  cols_kernel<N>(w)<<<grid, kWarps * 32, 0, ctx.stream>>>(x, n, w, partials, slices);
}

}  // namespace

void packed_gemv_init() {
  allow_stage_smem<trellis_rows1_kernel<2>>();
  allow_stage_smem<trellis_rows1_kernel<3>>();
  allow_stage_smem<trellis_rows1_kernel<4>>();
}

bool packed_gemv_fits(const Ten& x, const PackedTen& w) {
  if (x.rows() > kMaxRows || x.dtype != kBF16 || x.cols() != w.in || w.in % 8 != 0 ||
      !aligned16(x.p) || !aligned16(w.codes))
    return false;
  if (w.format == kPackedAffine)
    return (w.bits >= 2 && w.bits <= 8 && w.bits != 7) && w.group % 32 == 0 && w.group > 0 &&
           w.in % w.group == 0;
  if (w.format != kPackedTrellis || w.bits < 2 || w.bits > 4) return false;
  return w.axis == 1 ? w.in % kTrellisBlock == 0 : w.out % kTrellisBlock == 0;
}

size_t packed_partials_bytes(const Ctx& ctx, const PackedTen& w) {
  if (!w.transposed() || w.out % kTrellisBlock != 0) return 0;
  return size_t(cols_slices(ctx, w)) * kMaxRows * size_t(w.out) * sizeof(float);
}

void packed_gemv(Ctx& ctx, const Ten& y, const Ten& x, const PackedTen& w, const Ten& bias,
                 float* partials) {
  const int n = int(x.rows());
  const auto* xp = static_cast<const __nv_bfloat16*>(x.p);
  if (w.transposed()) {
    const int slices = cols_slices(ctx, w);
    if (n == 1)
      launch_cols<1>(ctx, xp, n, w, partials, slices);
    else
      launch_cols<kMaxRows>(ctx, xp, n, w, partials, slices);
    HEARTH_CUDA_LAUNCHED();
    partials_sum_kernel<<<grid_for(int64_t(n) * w.out, 256), 256, 0, ctx.stream>>>(
        y, partials, slices, n, w.out, bias.p, bias.dtype);
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  // Work units per row: 32-code chunks, one per lane; or 256-weight blocks, kTrellisUnroll
  // per warp and pass.
  const bool affine = w.format == kPackedAffine;
  const int split = row_split(ctx, w.out, affine ? w.in / 32 : w.in / kTrellisBlock,
                              affine ? 32 : kTrellisUnroll);
  if (!affine && n == 1 && stage_bytes(w.in) <= kStageMax) {
    launch_trellis_row(ctx, y, xp, w, bias, split);
  } else if (n == 1) {
    launch_rows<1>(ctx, y, xp, n, w, bias, split);
  } else {
    launch_rows<kMaxRows>(ctx, y, xp, n, w, bias, split);
  }
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
