// Elementwise and row-copy ops: embedding lookup, GLU activations, residual add, scale, softcap,
// fill, dtype conversion, x·sigmoid(gate), and the MoE gather / scatter-add. All are
// memory-bound grid-stride loops over f32 math; inputs and outputs may be F32, F16 or BF16
// (read per launch), which is how the CPU reference (f32) and the bf16 activations meet.
#include <algorithm>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;

#define GRID_STRIDE(i, n)                                                   \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void embedding_kernel(void* y, int ydt, const void* table, int tdt, const int32_t* ids,
                                 int64_t n_tokens, int64_t n_embd, float scale) {
  GRID_STRIDE(i, n_tokens * n_embd) {
    const int64_t t = i / n_embd, c = i - t * n_embd;
    st(y, ydt, i, ld(table, tdt, int64_t(ids[t]) * n_embd + c) * scale);
  }
}

__global__ void glu_kernel(void* y, int ydt, const void* g, int gdt, const void* u, int udt,
                           int64_t n, int act) {
  GRID_STRIDE(i, n) { st(y, ydt, i, activation_f(act, ld(g, gdt, i)) * ld(u, udt, i)); }
}

// op(a, b) on 8 bf16 values (16 bytes) each, every result rounded once.
template <typename Op>
__device__ __forceinline__ uint4 op_bf16x8(uint4 a, uint4 b, Op op) {
  float fa[8], fb[8];
  bf16x8_to_f32(a, fa);
  bf16x8_to_f32(b, fb);
  uint4 vy;
  __nv_bfloat162* py = reinterpret_cast<__nv_bfloat162*>(&vy);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    py[j] = __floats2bfloat162_rn(op(fa[2 * j], fb[2 * j]), op(fa[2 * j + 1], fb[2 * j + 1]));
  return vy;
}

// y = op(a, b) elementwise on bf16 rows moved 16 bytes (8 elements) at a time.
template <typename Op>
__device__ __forceinline__ void map2_bf16x8(uint4* y, const uint4* a, const uint4* b, int64_t n8,
                                            Op op) {
  GRID_STRIDE(i, n8) y[i] = op_bf16x8(a[i], b[i], op);
}

// act(gate) * up, the GLU of one element (the 16-byte kernels' op).
struct GluOp {
  int act;
  __device__ float operator()(float gv, float uv) const { return activation_f(act, gv) * uv; }
};

// bf16 GLU through 16-byte accesses: a prefill chunk's GLU moves three [tokens, n_ff] matrices,
// and the per-element kernel reached a quarter of the memory bandwidth on them.
__global__ void glu_bf16x8_kernel(uint4* y, const uint4* g, const uint4* u, int64_t n8, int act) {
  map2_bf16x8(y, g, u, n8, GluOp{act});
}

// The GLU of a stacked gate|up product: row r of `all` is [gate (f8 words) | up (f8 words)].
__global__ void glu_halves_bf16x8_kernel(uint4* y, const uint4* all, int64_t rows, int64_t f8,
                                         int act) {
  GRID_STRIDE(i, rows * f8) {
    const int64_t r = i / f8, c = i - r * f8;
    const uint4* row = all + r * 2 * f8;
    y[i] = op_bf16x8(row[c], row[f8 + c], GluOp{act});
  }
}

// Columns of a stacked product to their tensors (ColumnParts), with each part's bias: the
// composed form's rounding (the product rounded to y's dtype, then the bias added). A block
// row per row of `all`; the part is picked with constant indices (a dynamic index into the
// parameter struct would copy it to local memory in every thread).
__global__ void split_columns_kernel(const void* all, int dt, int64_t cols, ColumnParts parts) {
  const int64_t r = blockIdx.y;
  for (int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
       col += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = col, width = parts.cols[0];
    void* y = parts.y[0];
    const void* bias = parts.bias[0];
    int bias_dt = parts.bias_dtype[0];
#pragma unroll
    for (int k = 1; k < kGemvMaxSegs; ++k) {
      if (k < parts.n && c >= width) {
        c -= width;
        width = parts.cols[k];
        y = parts.y[k];
        bias = parts.bias[k];
        bias_dt = parts.bias_dtype[k];
      }
    }
    st(y, dt, r * width + c, ld(all, dt, r * cols + col) + (bias ? ld(bias, bias_dt, c) : 0.0f));
  }
}

// bf16 add (y = a + b·s) through 16-byte accesses.
__global__ void add_bf16x8_kernel(uint4* y, const uint4* a, const uint4* b, int64_t n8, float s) {
  map2_bf16x8(y, a, b, n8, [s](float av, float bv) { return av + bv * s; });
}

__global__ void add_kernel(void* y, int ydt, const void* a, int adt, const void* b, int bdt,
                           int64_t n, float s) {
  GRID_STRIDE(i, n) st(y, ydt, i, ld(a, adt, i) + ld(b, bdt, i) * s);
}

__global__ void scale_kernel(void* x, int dt, int64_t n, float s) {
  GRID_STRIDE(i, n) st(x, dt, i, ld(x, dt, i) * s);
}

__global__ void softcap_kernel(void* x, int dt, int64_t n, float cap) {
  GRID_STRIDE(i, n) st(x, dt, i, tanhf(ld(x, dt, i) / cap) * cap);
}

__global__ void fill_kernel(void* y, int dt, int64_t n, float v) {
  GRID_STRIDE(i, n) st(y, dt, i, v);
}

__global__ void convert_kernel(void* y, int ydt, const void* x, int xdt, int64_t n) {
  GRID_STRIDE(i, n) st(y, ydt, i, ld(x, xdt, i));
}

__global__ void mul_sigmoid_kernel(void* y, int ydt, const void* x, int xdt, const void* g, int gdt,
                                   int64_t n, int64_t cols, bool broadcast) {
  pdl_trigger();  // launched with launch_pdl: the attention output gate of a decode step
  pdl_wait();
  GRID_STRIDE(i, n) {
    const float gv = ld(g, gdt, broadcast ? i / cols : i);
    st(y, ydt, i, ld(x, xdt, i) * sigmoid_f(gv));
  }
}

__global__ void gather_rows_kernel(void* y, int ydt, const void* x, int xdt, const int32_t* rows,
                                   int64_t n_rows, int64_t cols) {
  GRID_STRIDE(i, n_rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    st(y, ydt, i, ld(x, xdt, int64_t(rows[r]) * cols + c));
  }
}

// Rows are distinct within one call (one expert sees a token once), so no atomics are needed.
__global__ void scatter_add_rows_kernel(void* y, int ydt, const void* x, int xdt,
                                        const int32_t* rows, const float* w, int64_t n_rows,
                                        int64_t cols) {
  GRID_STRIDE(i, n_rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t o = int64_t(rows[r]) * cols + c;
    st(y, ydt, o, ld(y, ydt, o) + w[r] * ld(x, xdt, i));
  }
}

}  // namespace

void embedding(Ctx& ctx, const Ten& y, const Ten& table, const int32_t* ids, float scale) {
  const int64_t n = y.rows(), c = table.cols();
  embedding_kernel<<<grid_for(n * c, kThreads), kThreads, 0, ctx.stream>>>(
      y.p, y.dtype, table.p, table.dtype, ids, n, c, scale);
  HEARTH_CUDA_LAUNCHED();
}

void glu(Ctx& ctx, const Ten& y, const Ten& gate, const Ten& up, int32_t act) {
  const int64_t n = y.numel();
  if (y.dtype == kBF16 && gate.dtype == kBF16 && up.dtype == kBF16 && n % 8 == 0 &&
      aligned16(y.p) && aligned16(gate.p) && aligned16(up.p)) {
    glu_bf16x8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<uint4*>(y.p), static_cast<const uint4*>(gate.p),
        static_cast<const uint4*>(up.p), n / 8, act);
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  glu_kernel<<<grid_for(n, kThreads), kThreads, 0, ctx.stream>>>(y.p, y.dtype, gate.p, gate.dtype,
                                                                 up.p, up.dtype, n, act);
  HEARTH_CUDA_LAUNCHED();
}

void glu_halves(Ctx& ctx, const Ten& y, const Ten& all, int32_t act) {
  const int64_t rows = all.rows(), f = all.cols() / 2;
  if (all.dtype != kBF16 || y.dtype != kBF16 || f % 8 != 0 || y.numel() != rows * f ||
      !aligned16(y.p) || !aligned16(all.p))
    cuda_fail("glu_halves", "bf16 [rows, 2f] with f a multiple of 8 is needed", __FILE__, __LINE__);
  glu_halves_bf16x8_kernel<<<grid_for(rows * f / 8, kThreads), kThreads, 0, ctx.stream>>>(
      static_cast<uint4*>(y.p), static_cast<const uint4*>(all.p), rows, f / 8, act);
  HEARTH_CUDA_LAUNCHED();
}

void split_columns(Ctx& ctx, const Ten& all, const ColumnParts& parts) {
  const int64_t rows = all.rows(), cols = all.cols();
  if (rows > 65535) cuda_fail("split_columns", "more than 65535 rows", __FILE__, __LINE__);
  const dim3 grid(unsigned(std::min<int64_t>((cols + kThreads - 1) / kThreads, 64)),
                  unsigned(rows));
  split_columns_kernel<<<grid, kThreads, 0, ctx.stream>>>(all.p, all.dtype, cols, parts);
  HEARTH_CUDA_LAUNCHED();
}

void add(Ctx& ctx, const Ten& y, const Ten& a, const Ten& b, float s) {
  const int64_t n = y.numel();
  if (y.dtype == kBF16 && a.dtype == kBF16 && b.dtype == kBF16 && n % 8 == 0 && aligned16(y.p) &&
      aligned16(a.p) && aligned16(b.p)) {
    add_bf16x8_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<uint4*>(y.p), static_cast<const uint4*>(a.p), static_cast<const uint4*>(b.p),
        n / 8, s);
  } else {
    add_kernel<<<grid_for(n, kThreads), kThreads, 0, ctx.stream>>>(y.p, y.dtype, a.p, a.dtype, b.p,
                                                                   b.dtype, n, s);
  }
  HEARTH_CUDA_LAUNCHED();
}

void scale(Ctx& ctx, const Ten& x, float s) {
  scale_kernel<<<grid_for(x.numel(), kThreads), kThreads, 0, ctx.stream>>>(x.p, x.dtype, x.numel(),
                                                                           s);
  HEARTH_CUDA_LAUNCHED();
}

void softcap(Ctx& ctx, const Ten& x, float cap) {
  softcap_kernel<<<grid_for(x.numel(), kThreads), kThreads, 0, ctx.stream>>>(x.p, x.dtype,
                                                                             x.numel(), cap);
  HEARTH_CUDA_LAUNCHED();
}

void fill(Ctx& ctx, const Ten& y, float value) {
  fill_kernel<<<grid_for(y.numel(), kThreads), kThreads, 0, ctx.stream>>>(y.p, y.dtype, y.numel(),
                                                                          value);
  HEARTH_CUDA_LAUNCHED();
}

void convert(Ctx& ctx, const Ten& dst, const Ten& src) {
  convert_kernel<<<grid_for(src.numel(), kThreads), kThreads, 0, ctx.stream>>>(
      dst.p, dst.dtype, src.p, src.dtype, src.numel());
  HEARTH_CUDA_LAUNCHED();
}

void mul_sigmoid(Ctx& ctx, const Ten& y, const Ten& x, const Ten& gate) {
  const int64_t rows = x.rows(), cols = x.cols();
  const bool broadcast = gate.numel() == rows && cols != 1;
  launch_pdl(ctx, mul_sigmoid_kernel, dim3(grid_for(x.numel(), kThreads)), dim3(kThreads), 0, y.p,
             y.dtype, x.p, x.dtype, gate.p, gate.dtype, x.numel(), cols, broadcast);
  HEARTH_CUDA_LAUNCHED();
}

void gather_rows(Ctx& ctx, const Ten& y, const Ten& x, const int32_t* rows) {
  const int64_t n = y.rows(), cols = x.cols();
  if (n == 0) return;
  gather_rows_kernel<<<grid_for(n * cols, kThreads), kThreads, 0, ctx.stream>>>(
      y.p, y.dtype, x.p, x.dtype, rows, n, cols);
  HEARTH_CUDA_LAUNCHED();
}

void scatter_add_rows(Ctx& ctx, const Ten& y, const Ten& x, const int32_t* rows,
                      const float* weights) {
  const int64_t n = x.rows(), cols = x.cols();
  if (n == 0) return;
  scatter_add_rows_kernel<<<grid_for(n * cols, kThreads), kThreads, 0, ctx.stream>>>(
      y.p, y.dtype, x.p, x.dtype, rows, weights, n, cols);
  HEARTH_CUDA_LAUNCHED();
}

void copy_bytes(Ctx& ctx, const Ten& dst, const Ten& src) {
  const size_t bytes = size_t(src.numel()) * dtype_size(DType(src.dtype));
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
}

}  // namespace hearth::cuda
