// Trellis-coded weights (QTIP-style bitshift trellis, "1mad" computed code, L = 12, T = 256,
// k = 2..4 bits per weight): the format, the reference decoder and the Viterbi encoder.
// Format facts (docs/QUANTIZATION.md): a row of `cols` weights is cols/256 blocks of 8k uint32
// words (little-endian bits); symbol t of a block sits at bit (255 - t)·k, time reversed, and
// the 12-bit state of t is the window read upward from there, wrapping to the block's first
// word (tail-biting). A weight is trellis_1mad_value(state) · scale[row] (fp16 scale).
// axis 1: rows are the output features, coded along the input dim ([out, in·k/32]).
// axis 0: stored transposed, rows are the input features ([in, out·k/32]).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace hearth::quant {

struct TrellisSpec {
  static constexpr int kStateBits = 12;              // L
  static constexpr int kStates = 1 << kStateBits;    // 4096
  static constexpr int kBlock = 256;                 // T: weights per block
  static constexpr std::string_view kCode = "1mad";  // the computed code's name
  static constexpr int kMinBits = 2;
  static constexpr int kMaxBits = 4;

  int bits = 3;  // k
  int axis = 1;  // 1: rows = out features; 0: stored transposed (rows = in features)

  static constexpr int block_words(int k) { return kBlock * k / 32; }  // 8k
  // uint32 words per stored row of `cols` weights (cols a multiple of kBlock).
  static constexpr int64_t row_words(int64_t cols, int k) { return cols / kBlock * block_words(k); }
};

// Throws hearth::Error naming `what` unless k is 2, 3 or 4.
void trellis_check_bits(int k, std::string_view what);

// The 1MAD code: a 32-bit LCG step, then the sum of its four bytes, centred and scaled to unit
// variance. Branch-free; the same arithmetic as every kernel (so results match bit for bit).
inline int trellis_1mad_int(uint32_t state) {
  const uint32_t z = state * 34038481u + 76625530u;
  const uint32_t p = (z & 0x00FF00FFu) + ((z >> 8) & 0x00FF00FFu);
  return int((p & 0xFFFFu) + (p >> 16)) - 510;
}
// 147.800537109375 (exact in f32) is the standard deviation of a sum of four uniform bytes.
inline constexpr float kTrellis1madScale = 147.800537109375f;
inline float trellis_1mad_value(uint32_t state) {
  return float(trellis_1mad_int(state)) / kTrellis1madScale;
}

// All 4096 code values, indexed by state (computed once).
const float* trellis_1mad_table();
// sqrt(mean of the squared code values over all 4096 states): the row scale's denominator.
float trellis_1mad_rms();

// Decodes one block (8k words) to its 256 code values (scale 1), out256[t] for t = 0..255.
void trellis_decode_block(const uint32_t* words, int k, float* out256);

// Packs one block's symbols (sym[t] < 2^k) into 8k words, the layout above.
void trellis_pack_block(const uint8_t* sym, int k, uint32_t* words);

// Tail-biting Viterbi encoder for one block at a time (QTIP Algorithm 4), squared error.
// Owns its scratch (about 0.3 MB); one per thread. Not thread-safe.
class TrellisEncoder {
 public:
  // isa: a kernel family from trellis_encoder_isas() (tests, benchmarks); empty: the best.
  explicit TrellisEncoder(int k, std::string_view isa = {});
  ~TrellisEncoder();
  TrellisEncoder(const TrellisEncoder&) = delete;
  TrellisEncoder& operator=(const TrellisEncoder&) = delete;

  int bits() const { return k_; }
  // Codes x[0..255] (already divided by the row scale) into 8k words; returns the squared error
  // sum of the decoded block against x.
  double encode_block(const float* x, uint32_t* words);

  struct Scratch;

 private:
  int k_;
  std::unique_ptr<Scratch> s_;
};

// The encoder kernel family this CPU runs by default: "avx512", "avx2" or "generic".
const char* trellis_encoder_isa();
// Every family this CPU can run, best first (they agree up to f32 rounding of near-ties).
std::vector<std::string> trellis_encoder_isas();

// The row scale rule: returns fp16(RMS(row) / trellis_1mad_rms()) and sets *inv_scale to 1 / the
// fp16-rounded scale (0 when it rounds to 0), the divisor a coder applies. Throws naming row r
// when the row has a non-finite value or its scale does not fit in fp16.
uint16_t trellis_row_scale(const float* row, int64_t cols, int64_t r, float* inv_scale);

class TrellisBlockCoder;  // trellis_coder.h

// Quantizes w [rows, cols] (f32, row-major) row by row: scales_f16[r] = fp16(RMS(row r) /
// trellis_1mad_rms()), codes [rows, cols·k/32]. An all-zero row (or one too small for an fp16
// scale) gets scale 0 so it decodes to exact zeros. For axis 0 pass Wᵀ. cols % 256 == 0.
// The blocks are coded by `coder` (nullptr: TrellisEncoder on `pool`'s threads, or on the
// calling thread when pool is nullptr too).
void quantize_trellis_rows(const float* w, int64_t rows, int64_t cols, int k, uint32_t* codes,
                           uint16_t* scales_f16, ThreadPool* pool,
                           TrellisBlockCoder* coder = nullptr);

// Reference decoder: out [rows, cols] f32 = code value · scale, the stored (row) layout.
void dequantize_trellis_rows(const uint32_t* codes, const uint16_t* scales_f16, int64_t rows,
                             int64_t cols, int k, float* out);

}  // namespace hearth::quant
