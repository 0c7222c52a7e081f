// Trellis format helpers: the code table, block (un)packing and the row quantizer / reference
// dequantizer. The Viterbi search itself is in trellis_encode.cpp.
#include "quant/trellis.h"

#include <cmath>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/trellis_coder.h"

namespace hearth::quant {

namespace {

using Spec = TrellisSpec;

struct CodeTable {
  float value[Spec::kStates];
  float rms;
  CodeTable() {
    double sum_sq = 0;
    for (uint32_t s = 0; s < uint32_t(Spec::kStates); ++s) {
      value[s] = trellis_1mad_value(s);
      sum_sq += double(value[s]) * value[s];
    }
    rms = float(std::sqrt(sum_sq / Spec::kStates));
  }
};

const CodeTable& code_table() {
  static const CodeTable table;
  return table;
}

// The 12-bit window starting at bit `pos` of a block of `n_words` words, wrapping at the end.
inline uint32_t block_window(const uint32_t* words, int n_words, int pos) {
  const int w = pos >> 5, off = pos & 31;
  uint32_t v = words[w] >> off;
  if (off + Spec::kStateBits > 32) v |= words[w + 1 == n_words ? 0 : w + 1] << (32 - off);
  return v & uint32_t(Spec::kStates - 1);
}

}  // namespace

void trellis_check_bits(int k, std::string_view what) {
  if (k < Spec::kMinBits || k > Spec::kMaxBits)
    fail("{}: trellis bits must be 2, 3 or 4, got {}", what, k);
}

const float* trellis_1mad_table() { return code_table().value; }
float trellis_1mad_rms() { return code_table().rms; }

void trellis_decode_block(const uint32_t* words, int k, float* out256) {
  const int n_words = Spec::block_words(k);
  for (int t = 0; t < Spec::kBlock; ++t)
    out256[t] = trellis_1mad_value(block_window(words, n_words, (Spec::kBlock - 1 - t) * k));
}

void trellis_pack_block(const uint8_t* sym, int k, uint32_t* words) {
  const int n_words = Spec::block_words(k);
  for (int w = 0; w < n_words; ++w) words[w] = 0;
  for (int t = 0; t < Spec::kBlock; ++t) {
    const int pos = (Spec::kBlock - 1 - t) * k, w = pos >> 5, off = pos & 31;
    const uint32_t s = sym[t] & ((1u << k) - 1);
    words[w] |= s << off;
    // A symbol straddling two words never straddles the block's end (256k is a multiple of 32).
    if (off + k > 32) words[w + 1] |= s >> (32 - off);
  }
}

uint16_t trellis_row_scale(const float* row, int64_t cols, int64_t r, float* inv_scale) {
  double sum_sq = 0;
  for (int64_t c = 0; c < cols; ++c) sum_sq += double(row[c]) * row[c];
  if (!std::isfinite(sum_sq))
    fail("quantize_trellis_rows: row {} has a non-finite or too large value", r);
  const double scale = std::sqrt(sum_sq / double(cols)) / trellis_1mad_rms();
  if (scale > 65504.0)
    fail("quantize_trellis_rows: row {} scale {} does not fit in fp16", r, scale);
  // Scale 0 (all-zero rows, and rows too small for an fp16 scale) decodes to exact zeros,
  // where scale 1 would decode a zero row to code noise of RMS ~0.1-0.3.
  const uint16_t h = f32_to_f16(float(scale));
  const float rounded = f16_to_f32(h);
  *inv_scale = rounded > 0 ? 1.0f / rounded : 0.0f;
  return h;
}

void quantize_trellis_rows(const float* w, int64_t rows, int64_t cols, int k, uint32_t* codes,
                           uint16_t* scales_f16, ThreadPool* pool, TrellisBlockCoder* coder) {
  trellis_check_bits(k, "quantize_trellis_rows");
  if (rows < 0 || cols <= 0 || cols % Spec::kBlock != 0)
    fail("quantize_trellis_rows: cols must be a positive multiple of {}, got [{}, {}]",
         Spec::kBlock, rows, cols);
  // Every block of a row is divided by the same rounded scale: the decoder multiplies by
  // exactly that value.
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float inv = 0;
    scales_f16[r] = trellis_row_scale(w + r * cols, cols, r, &inv);
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = w[r * cols + c] * inv;
  }
  std::unique_ptr<TrellisBlockCoder> own;
  if (!coder) coder = (own = make_cpu_trellis_coder(pool)).get();
  coder->encode(x.data(), rows * cols / Spec::kBlock, k, codes);
}

void dequantize_trellis_rows(const uint32_t* codes, const uint16_t* scales_f16, int64_t rows,
                             int64_t cols, int k, float* out) {
  trellis_check_bits(k, "dequantize_trellis_rows");
  if (rows < 0 || cols <= 0 || cols % Spec::kBlock != 0)
    fail("dequantize_trellis_rows: cols must be a positive multiple of {}, got [{}, {}]",
         Spec::kBlock, rows, cols);
  const int words = Spec::block_words(k);
  const int64_t blocks_per_row = cols / Spec::kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = f16_to_f32(scales_f16[r]);
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      float* dst = out + r * cols + b * Spec::kBlock;
      trellis_decode_block(codes + (r * blocks_per_row + b) * words, k, dst);
      for (int t = 0; t < Spec::kBlock; ++t) dst[t] *= scale;
    }
  }
}

}  // namespace hearth::quant
