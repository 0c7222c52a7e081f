// Device-side helpers shared by the kernels: loads and stores of the three float dtypes as f32
// (dtype is a run-time value that is uniform across a launch, so the branch costs nothing),
// warp and block reductions, and grid sizing.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/common.h"

namespace hearth::cuda {

// Position p's row of a paged cache (common.h, KvDev): `off` elements from its block's start
// (the layer's k_off or v_off, plus any column), rows `row` elements apart.
__device__ __forceinline__ __nv_bfloat16* kv_row(void* const* blocks, int64_t off, int64_t row,
                                                 int64_t p) {
  return static_cast<__nv_bfloat16*>(blocks[p >> kKvBlockShift]) + off + (p & (kKvBlock - 1)) * row;
}

__device__ __forceinline__ float ld(const void* p, int dt, int64_t i) {
  if (dt == kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (dt == kF32) return static_cast<const float*>(p)[i];
  return __half2float(static_cast<const __half*>(p)[i]);
}

__device__ __forceinline__ void st(void* p, int dt, int64_t i, float v) {
  if (dt == kBF16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  else if (dt == kF32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__half*>(p)[i] = __float2half(v);
}

// The value v takes once stored in dtype dt. Fused kernels round where the composed ops would
// have stored and re-read an intermediate, so both give the same result.
__device__ __forceinline__ float rounded(int dt, float v) {
  if (dt == kBF16) return __bfloat162float(__float2bfloat16(v));
  if (dt == kF16) return __half2float(__float2half(v));
  return v;
}

// RMSNorm on 16-byte words of 8 bf16, as the decode products' input norm computes it:
// ss + Σ v_i² (fma in element order), and each v_i · inv · (gain[base + i] + offset) rounded.
__device__ __forceinline__ float add_squares_bf16x8(const uint4& v, float ss) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    ss = fmaf(f.x, f.x, ss);
    ss = fmaf(f.y, f.y, ss);
  }
  return ss;
}
// s + the sum of 8 bf16 values, in f32, in order.
__device__ __forceinline__ float sum_bf16x8(const uint4& v, float s) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    s += f.x;
    s += f.y;
  }
  return s;
}
__device__ __forceinline__ uint4 scale_bf16x8(uint4 v, float inv, const void* gain, int gain_dt,
                                              int64_t base, float offset) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    const float g0 = ld(gain, gain_dt, base + 2 * j) + offset;
    const float g1 = ld(gain, gain_dt, base + 2 * j + 1) + offset;
    h[j] = __floats2bfloat162_rn(f.x * inv * g0, f.y * inv * g1);
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float s = lane < n_warps ? part[lane] : 0.0f;
  return warp_sum(s);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
// acc += v · a · b per component (the Gated DeltaNet mixers' state passes; the product order
// is theirs).
__device__ __forceinline__ void add_scaled4(float4& acc, const float4& v, float a, float b) {
  acc.x += v.x * a * b;
  acc.y += v.y * a * b;
  acc.z += v.z * a * b;
  acc.w += v.w * a * b;
}

// Programmatic dependent launch (Hopper and later). A kernel started by launch_pdl may begin
// while the kernel before it in the stream is still running: it must call pdl_wait() before it
// reads anything an earlier kernel wrote or writes anything an earlier kernel reads (weights
// are neither, so they may be fetched before). pdl_trigger() lets the next kernel start early.
// Both are no-ops before sm_90 and when the kernel was launched normally.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The GLU activations as the CPU computes them: silu, gelu with the tanh approximation, gelu.
__device__ __forceinline__ float activation_f(int act, float x) {
  if (act == int(Activation::Silu)) return silu_f(x);
  if (act == int(Activation::GeluTanh)) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

// A 16-byte weight load that streams past L1 (decode reads each weight once per step).
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The 8 bf16 of a 16-byte word as f32, in memory order (exact: a bf16 is an f32's top half).
__device__ __forceinline__ void bf16x8_to_f32(const uint4& w, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 p = __bfloat1622float2(h[j]);
    f[2 * j] = p.x;
    f[2 * j + 1] = p.y;
  }
}

// Dot product of two 16-byte words of 8 bf16 each, in f32, in a fixed order.
// (Kept on bf16 pairs: the decode GEMVs' inner loop, measured in this form.)
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// Launches kernel<<<grid, block, smem, ctx.stream>>>(args...) allowing programmatic overlap
// with the previous kernel when the device supports it (ctx.pdl). Only for kernels that call
// pdl_wait() as described above.
template <typename... KArgs, typename... Args>
void launch_pdl(const Ctx& ctx, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = ctx.pdl ? 1 : 0;
  HEARTH_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 64 ? 65535 * 64 : b));
}

}  // namespace hearth::cuda
