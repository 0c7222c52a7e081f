// Elementwise and row-copy ops: embedding lookup, GLU activations, residual add, scale, softcap,
// fill, dtype conversion, x·sigmoid(gate), and the MoE gather / scatter-add. All are
// memory-bound grid-stride loops over f32 math; inputs and outputs may be F32, F16 or BF16
// (read per launch), which is how the CPU reference (f32) and the bf16 activations meet.
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

// bf16 GLU through 16-byte accesses: a prefill chunk's GLU moves three [tokens, n_ff] matrices,
// and the per-element kernel reached a quarter of the memory bandwidth on them.
__global__ void glu_bf16x8_kernel(uint4* y, const uint4* g, const uint4* u, int64_t n8, int act) {
  GRID_STRIDE(i, n8) {
    const uint4 vg = g[i], vu = u[i];
    uint4 vy;
    const __nv_bfloat162* pg = reinterpret_cast<const __nv_bfloat162*>(&vg);
    const __nv_bfloat162* pu = reinterpret_cast<const __nv_bfloat162*>(&vu);
    __nv_bfloat162* py = reinterpret_cast<__nv_bfloat162*>(&vy);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fg = __bfloat1622float2(pg[j]), fu = __bfloat1622float2(pu[j]);
      py[j] = __floats2bfloat162_rn(activation_f(act, fg.x) * fu.x, activation_f(act, fg.y) * fu.y);
    }
    y[i] = vy;
  }
}

// bf16 fast path for the decode hot loop: 8 elements per thread through 16-byte accesses.
__global__ void add_bf16x8_kernel(uint4* y, const uint4* a, const uint4* b, int64_t n8, float s) {
  GRID_STRIDE(i, n8) {
    uint4 va = a[i], vb = b[i], vy;
    const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
    __nv_bfloat162* py = reinterpret_cast<__nv_bfloat162*>(&vy);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
      py[j] = __floats2bfloat162_rn(fa.x + fb.x * s, fa.y + fb.y * s);
    }
    y[i] = vy;
  }
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
