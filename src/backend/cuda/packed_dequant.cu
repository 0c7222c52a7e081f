// Packed weights decoded to bf16: stored rows for the prefill GEMM (which then reads them as any
// bf16 weight), and embedding rows. A thread decodes 8 consecutive values of a stored row and
// writes them as one 16-byte word; every value is computed on its own (an affine code from its
// bit offset, a trellis state from its window), so the work is spread evenly over all threads.
#include "backend/cuda/packed_decode.cuh"

namespace hearth::cuda {

namespace {

// Values [c, c + 8) of stored row r, times `mult`. Stored rows are W's rows, or Wᵀ's for a
// transposed trellis weight; c is a multiple of 8, so 8 affine values share one group.
__device__ __forceinline__ void stored_values8(const PackedTen& w, int64_t r, int64_t c, float mult,
                                               float (&v)[8]) {
  if (w.format == kPackedAffine) {
    const uint32_t* row = w.codes + r * (w.in * w.bits / 32);
    const int64_t g = r * (w.in / w.group) + c / w.group;
    const float s = ld(w.scales, w.param_dt, g), b = ld(w.biases, w.param_dt, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = (s * float(affine_code_at(row, c + j, w.bits)) + b) * mult;
    return;
  }
  const int64_t cols = stored_transposed(w) ? w.out : w.in;
  const int64_t block_words = kTrellisBlock * w.bits / 32;
  const uint32_t* block = w.codes + (r * (cols / kTrellisBlock) + c / kTrellisBlock) * block_words;
  const float s = ld(w.scales, kF16, r);
  const int t0 = int(c % kTrellisBlock);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    v[j] = trellis_1mad(trellis_state_k(block, w.bits, t0 + j)) / kTrellis1madScale * s * mult;
}

__device__ __forceinline__ uint4 pack_bf16x8(const float (&v)[8]) {
  uint4 o;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  return o;
}

__global__ void dequantize_kernel(uint4* dst, PackedTen w, int64_t r0, int64_t rows) {
  const int64_t cols = stored_transposed(w) ? w.out : w.in, per_row = cols / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = (i % per_row) * 8;
    float v[8];
    stored_values8(w, r0 + r, c, 1.0f, v);
    dst[i] = pack_bf16x8(v);
  }
}

// One block per token: its row of W (a stored row unless the table is transposed, then one
// value per stored row, the slow general path).
__global__ void embedding_kernel(Ten y, PackedTen w, const int32_t* ids, float scale) {
  const int64_t t = blockIdx.x, id = ids[t], H = w.in;
  for (int64_t c = int64_t(threadIdx.x) * 8; c < H; c += int64_t(blockDim.x) * 8) {
    float v[8];
    if (!stored_transposed(w)) {
      stored_values8(w, id, c, scale, v);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = packed_value(w, id, c + j) * scale;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) st(y.p, y.dtype, t * H + c + j, v[j]);
  }
}

}  // namespace

void packed_dequantize(Ctx& ctx, void* dst, const PackedTen& w, int64_t r0, int64_t r1) {
  const int64_t cols = w.transposed() ? w.out : w.in;
  dequantize_kernel<<<grid_for((r1 - r0) * cols / 8, 256), 256, 0, ctx.stream>>>(
      static_cast<uint4*>(dst), w, r0, r1 - r0);
  HEARTH_CUDA_LAUNCHED();
}

void packed_embedding(Ctx& ctx, const Ten& y, const PackedTen& table, const int32_t* ids,
                      float scale) {
  embedding_kernel<<<unsigned(y.rows()), 128, 0, ctx.stream>>>(y, table, ids, scale);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
