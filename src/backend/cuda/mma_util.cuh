// PTX wrappers shared by the tensor-core attention kernels (attention_mma.cu for prefill,
// attention_rows_mma.cu for decode rows): cp.async copies, ldmatrix, the bf16 m16n8k16 mma, exp2,
// bf16/f16 packing and the swizzled layout of [rows][HD] bf16 tiles in shared memory. sm_80+.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common.h"

namespace hearth::cuda {

constexpr float kLog2e = 1.4426950408889634f;

// Host: the shared memory a block may opt into on the current device, or 0 where these kernels
// cannot run (before sm_80).
inline size_t mma_smem_optin() {
  int dev = 0, major = 0, optin = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&dev));
  HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return major >= 8 ? size_t(optin) : 0;
}

// Host: the constants that turn a raw score s = q·k into log2 units in the tensor-core kernels:
// with a softcap, tanh(s · in) · out (in = scale / softcap, out = softcap · log2e); without,
// s · out (out = scale · log2e; in unused).
inline void log2_score_constants(float scale, float softcap, float& in, float& out) {
  in = softcap > 0.0f ? scale / softcap : 0.0f;
  out = (softcap > 0.0f ? softcap : scale) * kLog2e;
}

// Host: lets `kernel` take `smem` bytes of dynamic shared memory, the carveout at its maximum.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t smem) {
  HEARTH_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16-byte global → shared copy, bypassing L1; `valid` false writes 16 zero bytes (src-size 0,
// nothing is read from src).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of 8×8 b16 matrix i, and
// r[i] receives matrix i in the mma fragment order: lane l holds row l/4, columns 2(l%4), 2(l%4)+1.
// With .trans lane l holds rows 2(l%4), 2(l%4)+1 of column l/4 (the matrix transposed).
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A·B + D, A 16×16 (row-major), B 16×8 (column-major), bf16 in, f32 accumulate.
// Fragments for lane l, g = l>>2 (groupID), t = l&3 (thread in group), each b32 register two
// b16 elements, the lower column/row index in the low half:
//   A: a[0] = (row g,   cols 2t, 2t+1)   a[1] = (row g+8, cols 2t, 2t+1)
//      a[2] = (row g,   cols 2t+8, 2t+9) a[3] = (row g+8, cols 2t+8, 2t+9)
//   B: b0 = (rows k = 2t, 2t+1, col n = g)  b1 = (rows k = 2t+8, 2t+9, col n = g)
//   C/D: c[0], c[1] = (row g, cols 2t, 2t+1)  c[2], c[3] = (row g+8, cols 2t, 2t+1)
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; ex2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Shared tiles are [rows][HD] bf16, rows of HD·2 bytes (a multiple of 128 for HD ≥ 64, so every
// row starts on bank 0). The 16-byte chunk c of row r is stored at chunk c ^ (r & 7): the 8 rows
// of an ldmatrix 8×8 matrix (8 consecutive rows, same logical chunk) then land in 8 different
// 16-byte bank groups, and 8 consecutive chunks of one row (one cp.async quarter-warp) are only
// permuted within their 128 bytes — both conflict-free. Byte offset of (row r, chunk c):
template <int HD>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return uint32_t(r * (HD * 2) + ((c ^ (r & 7)) << 4));
}

// Q's A fragment for k-step kk (dims 16kk..16kk+15): from registers where the kernel keeps them
// (qf, loaded once), else by ldmatrix from the swizzled Q tile (q_base: the lane's row; xv: the
// lane's 4 chunk offsets, as the kernels compute them).
template <bool kInRegs, int N>
__device__ __forceinline__ void q_fragment(uint32_t (&af)[4], const uint32_t (&qf)[N][4], int kk,
                                           uint32_t q_base, const uint32_t (&xv)[4]) {
  if constexpr (kInRegs) {
    af[0] = qf[kk][0];
    af[1] = qf[kk][1];
    af[2] = qf[kk][2];
    af[3] = qf[kk][3];
  } else {
    ldsm_x4(q_base + (kk >> 2) * 128 + xv[kk & 3], af);
  }
}

}  // namespace hearth::cuda
