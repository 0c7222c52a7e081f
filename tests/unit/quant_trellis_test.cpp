// The trellis codec (src/quant/trellis.h) and its CPU matvec: the 1MAD code, the bit layout
// against a slow bit-by-bit reference, the encoder's optimality and tail-biting, its MSE against
// QTIP's figures, the matvec against dequantize + a naive product, and the argument errors.
// Random data only (any words are a valid code), so the test stays fast under ASan too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/trellis_matvec.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/trellis.h"

namespace hearth::quant {
namespace {

constexpr int kT = TrellisSpec::kBlock;

// N(0,1) from mt19937 by Box-Muller: the same numbers with every standard library.
std::vector<float> normal_samples(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = (double(rng()) + 1.0) / 4294967296.0, u2 = double(rng()) / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = float(r * std::cos(2 * std::numbers::pi * u2));
    if (i + 1 < n) out[i + 1] = float(r * std::sin(2 * std::numbers::pi * u2));
  }
  return out;
}

std::vector<uint32_t> random_words(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> w(n);
  for (auto& v : w) v = rng();
  return w;
}

// Bit i of a block (little-endian words).
int bit(const uint32_t* words, int i) { return (words[i >> 5] >> (i & 31)) & 1; }

// The notes' definition, bit by bit: state_t is the 12 bits read upward from bit (255 - t)·k,
// wrapping to bit 0; the value is the four-byte sum of the LCG step.
int slow_state(const uint32_t* words, int k, int t) {
  const int n_bits = kT * k;
  int state = 0;
  for (int i = 0; i < 12; ++i) state |= bit(words, ((kT - 1 - t) * k + i) % n_bits) << i;
  return state;
}
float slow_value(uint32_t state) {
  const uint32_t z = state * 34038481u + 76625530u;
  int sum = 0;
  for (int b = 0; b < 4; ++b) sum += (z >> (8 * b)) & 0xFF;
  return float(sum - 510) / 147.800537109375f;
}

double block_error(const float* x, const uint32_t* words, int k) {
  float y[kT];
  trellis_decode_block(words, k, y);
  double e = 0;
  for (int t = 0; t < kT; ++t) e += (double(x[t]) - y[t]) * (double(x[t]) - y[t]);
  return e;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Trellis1mad, UnitVarianceAnd713DistinctValues) {
  const float* table = trellis_1mad_table();
  double sum = 0, sum_sq = 0;
  std::set<float> distinct;
  for (uint32_t s = 0; s < 4096; ++s) {
    EXPECT_EQ(table[s], slow_value(s)) << "state " << s;
    EXPECT_EQ(trellis_1mad_value(s), table[s]);
    sum += table[s];
    sum_sq += double(table[s]) * table[s];
    distinct.insert(table[s]);
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.02);
  EXPECT_NEAR(sum_sq / 4096, 1.0, 0.02);
  EXPECT_NEAR(trellis_1mad_rms(), std::sqrt(sum_sq / 4096), 1e-6);
  // The byte sum could span -510..510 (1021 integers), but the 4096 LCG outputs reach only 713
  // of them, from -448 to 454.
  EXPECT_EQ(distinct.size(), 713u);
  EXPECT_EQ(*distinct.begin(), -448 / 147.800537109375f);
  EXPECT_EQ(*distinct.rbegin(), 454 / 147.800537109375f);
}

TEST(TrellisLayout, DecodeMatchesBitByBitReference) {
  for (int k = 2; k <= 4; ++k) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const auto words = random_words(TrellisSpec::block_words(k), seed * 10 + k);
      float y[kT];
      trellis_decode_block(words.data(), k, y);
      for (int t = 0; t < kT; ++t)
        ASSERT_EQ(y[t], slow_value(slow_state(words.data(), k, t))) << "k " << k << " t " << t;
    }
  }
}

// Consecutive states shift by k bits, and state 0 continues from state 255 (tail-biting).
TEST(TrellisLayout, StatesFormATailBitingPath) {
  for (int k = 2; k <= 4; ++k) {
    const auto words = random_words(TrellisSpec::block_words(k), 77 + k);
    for (int t = 0; t < kT; ++t) {
      const int prev = slow_state(words.data(), k, (t + kT - 1) % kT);
      const int cur = slow_state(words.data(), k, t);
      ASSERT_EQ(cur >> k, prev & ((1 << (12 - k)) - 1)) << "k " << k << " t " << t;
    }
  }
}

TEST(TrellisLayout, PackPutsSymbolTAtBit255MinusTTimesK) {
  for (int k = 2; k <= 4; ++k) {
    std::mt19937 rng(k);
    uint8_t sym[kT];
    for (auto& s : sym) s = uint8_t(rng() % (1u << k));
    std::vector<uint32_t> words(TrellisSpec::block_words(k), 0xdeadbeef);  // poisoned
    trellis_pack_block(sym, k, words.data());
    for (int t = 0; t < kT; ++t) {
      int s = 0;
      for (int i = 0; i < k; ++i) s |= bit(words.data(), (kT - 1 - t) * k + i) << i;
      ASSERT_EQ(s, sym[t]) << "k " << k << " t " << t;
      EXPECT_EQ(slow_state(words.data(), k, t) & ((1 << k) - 1), sym[t]);
    }
  }
}

TEST(TrellisEncoder, ReportsTheErrorOfWhatItWrites) {
  const auto x = normal_samples(4 * kT, 5);
  for (int k = 2; k <= 4; ++k) {
    TrellisEncoder enc(k);
    for (int b = 0; b < 4; ++b) {
      std::vector<uint32_t> words(TrellisSpec::block_words(k), 0xffffffffu);
      const double err = enc.encode_block(&x[b * kT], words.data());
      EXPECT_NEAR(err, block_error(&x[b * kT], words.data(), k), 1e-9 * kT) << "k " << k;
    }
  }
}

// Any word block is a valid tail-biting path. Changing one symbol (outside the 12/k - 1 symbols
// at the block's end that the start state shares, which Algorithm 4 fixes in its first pass)
// gives another path with the same wrap, so the Viterbi result must not be beaten by it; nor by
// random codes.
TEST(TrellisEncoder, NoSingleSymbolChangeOrRandomCodeDoesBetter) {
  const auto x = normal_samples(2 * kT, 11);
  for (int k = 2; k <= 4; ++k) {
    TrellisEncoder enc(k);
    const int n_words = TrellisSpec::block_words(k);
    const int shared = 12 / k - 1;
    for (int b = 0; b < 2; ++b) {
      const float* xb = &x[b * kT];
      std::vector<uint32_t> words(n_words);
      const double err = enc.encode_block(xb, words.data());
      // Float costs: ties within the f32 rounding of a 256-term sum are not distinguished.
      const double slack = 1e-5 * err + 1e-6;
      for (int t = 0; t < kT - shared; ++t) {
        for (int s = 1; s < (1 << k); ++s) {
          auto changed = words;
          for (int i = 0; i < k; ++i) {
            const int pos = (kT - 1 - t) * k + i;
            if ((s >> i) & 1) changed[pos >> 5] ^= 1u << (pos & 31);
          }
          ASSERT_GE(block_error(xb, changed.data(), k), err - slack) << "k " << k << " t " << t;
        }
      }
      for (uint32_t seed = 0; seed < 200; ++seed) {
        const auto random = random_words(n_words, seed + 1000 * k);
        ASSERT_GE(block_error(xb, random.data(), k), err);
      }
    }
  }
}

// A block that is itself a code sequence is found again exactly (zero error).
TEST(TrellisEncoder, ReencodingDecodedValuesIsExact) {
  for (int k = 2; k <= 4; ++k) {
    TrellisEncoder enc(k);
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const auto words = random_words(TrellisSpec::block_words(k), 500 + seed * 7 + k);
      float y[kT];
      trellis_decode_block(words.data(), k, y);
      std::vector<uint32_t> again(words.size());
      EXPECT_EQ(enc.encode_block(y, again.data()), 0.0) << "k " << k << " seed " << seed;
      EXPECT_EQ(block_error(y, again.data(), k), 0.0);
    }
  }
}

// The wrap matters: symbol 0's state reads the block's first bits, which belong to symbol 255.
TEST(TrellisEncoder, PathBitesItsTail) {
  const int k = 3;
  const auto x = normal_samples(kT, 3);
  std::vector<uint32_t> words(TrellisSpec::block_words(k));
  TrellisEncoder enc(k);
  const double err = enc.encode_block(x.data(), words.data());
  float y[kT];
  trellis_decode_block(words.data(), k, y);
  auto flipped = words;
  flipped[0] ^= 1u;  // bit 0: symbol 255's low bit, also in the windows of t = 0..3
  float z[kT];
  trellis_decode_block(flipped.data(), k, z);
  EXPECT_NE(y[0], z[0]);
  EXPECT_NE(y[255], z[255]);
  EXPECT_EQ(y[128], z[128]);
  EXPECT_GT(block_error(x.data(), flipped.data(), k), err);
}

// Every encoder kernel family this CPU runs finds the same optimum (up to f32 near-ties).
TEST(TrellisEncoder, KernelFamiliesAgree) {
  const auto x = normal_samples(2 * kT, 21);
  for (int k = 2; k <= 4; ++k) {
    double best = -1;
    for (const auto& isa : trellis_encoder_isas()) {
      TrellisEncoder enc(k, isa);
      std::vector<uint32_t> words(TrellisSpec::block_words(k));
      double err = 0;
      for (int b = 0; b < 2; ++b) {
        const double e = enc.encode_block(&x[b * kT], words.data());
        EXPECT_NEAR(e, block_error(&x[b * kT], words.data(), k), 1e-9 * kT) << isa;
        err += e;
      }
      if (best < 0) best = err;
      EXPECT_NEAR(err, best, 1e-5 * best) << isa << " k " << k;
    }
  }
  EXPECT_STREQ(trellis_encoder_isa(), trellis_encoder_isas().front().c_str());
  EXPECT_NE(error_of([] { TrellisEncoder enc(3, "avx9000"); }).find("avx9000"), std::string::npos);
}

// QTIP Table 2 (tail-biting, L = 12): k=2 0.0733, k=3 0.0198, k=4 0.0055. 1MAD measures ~1.7%
// above the k=2 figure on large samples (docs/QUANTIZATION.md says why); 2^15 samples add ~1%
// of noise, so 3% is the bound.
TEST(TrellisEncoder, GaussianMseNearQtip) {
  const auto x = normal_samples(1 << 15, 2024);
  const double qtip[] = {0.0733, 0.0198, 0.0055};
  ThreadPool pool(2);
  for (int k = 2; k <= 4; ++k) {
    const int64_t rows = 1 << 15 >> 8;
    std::vector<uint32_t> codes(size_t(rows) * TrellisSpec::block_words(k));
    // One block at a time, scale 1: x itself is unit variance, so no row scale is wanted.
    pool.parallel_for(rows, 1, [&](int64_t b, int64_t e) {
      TrellisEncoder local(k);
      for (int64_t r = b; r < e; ++r)
        local.encode_block(&x[size_t(r) * kT], &codes[size_t(r) * TrellisSpec::block_words(k)]);
    });
    double err = 0;
    for (int64_t r = 0; r < rows; ++r)
      err += block_error(&x[size_t(r) * kT], &codes[size_t(r) * TrellisSpec::block_words(k)], k);
    const double mse = err / double(x.size());
    EXPECT_NEAR(mse / qtip[k - 2], 1.0, 0.03) << "k " << k << " mse " << mse;
  }
}

TEST(TrellisRows, ScalesZeroRowsAndThreadsAgree) {
  const int64_t rows = 4, cols = 512;
  auto w = normal_samples(size_t(rows * cols), 9);
  for (int64_t c = 0; c < cols; ++c) {
    w[size_t(cols + c)] *= 0.01f;   // row 1: small
    w[size_t(2 * cols + c)] = 0;    // row 2: zero
    w[size_t(3 * cols + c)] *= 30;  // row 3: large
  }
  const int k = 3;
  const size_t n_words = size_t(TrellisSpec::row_words(cols, k) * rows);
  std::vector<uint32_t> codes(n_words), codes_mt(n_words);
  std::vector<uint16_t> scales(rows), scales_mt(rows);
  quantize_trellis_rows(w.data(), rows, cols, k, codes.data(), scales.data(), nullptr);
  ThreadPool pool(2);
  quantize_trellis_rows(w.data(), rows, cols, k, codes_mt.data(), scales_mt.data(), &pool);
  EXPECT_EQ(codes, codes_mt);
  EXPECT_EQ(scales, scales_mt);
  EXPECT_EQ(scales[2], 0);
  std::vector<float> back(size_t(rows * cols), -1.0f);
  dequantize_trellis_rows(codes.data(), scales.data(), rows, cols, k, back.data());
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0, err = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = w[size_t(r * cols + c)], d = v - back[size_t(r * cols + c)];
      sum_sq += v * v;
      err += d * d;
    }
    if (r == 2) {
      EXPECT_EQ(err, 0.0);
      continue;
    }
    const float want = float(std::sqrt(sum_sq / cols) / trellis_1mad_rms());
    EXPECT_EQ(scales[size_t(r)], f32_to_f16(want)) << "row " << r;
    EXPECT_LT(err / sum_sq, 0.03) << "row " << r;  // ~0.02 relative MSE at k = 3
  }
}

void expect_matvec_matches(const std::string& isa, int64_t rows, int64_t cols, int k, int axis,
                           int64_t n, ThreadPool& pool) {
  // Stored matrix: axis 1 [rows, cols]; axis 0 Wᵀ [cols, rows].
  const int64_t s_rows = axis == 1 ? rows : cols, s_cols = axis == 1 ? cols : rows;
  const auto codes = random_words(size_t(TrellisSpec::row_words(s_cols, k) * s_rows),
                                  uint32_t(rows * 131 + cols * 7 + k + axis));
  std::vector<uint16_t> scales(static_cast<size_t>(s_rows));
  std::mt19937 rng(uint32_t(rows + cols));
  for (auto& s : scales) s = f32_to_f16(0.01f + float(rng() % 1000) / 1e4f);
  scales[0] = 0;  // a zero row (scale 0) contributes nothing
  std::vector<float> stored(size_t(s_rows * s_cols));
  dequantize_trellis_rows(codes.data(), scales.data(), s_rows, s_cols, k, stored.data());
  const auto x = normal_samples(size_t(n * cols), uint32_t(n + 3));
  std::vector<float> y(size_t(n * rows), NAN);  // poisoned
  cpu::detail::trellis_matvec_with(isa, codes.data(), scales.data(), rows, cols, k, axis, x.data(),
                                   n, y.data(), pool);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double w = axis == 1 ? stored[size_t(r * cols + c)] : stored[size_t(c * rows + r)];
        want += w * x[size_t(j * cols + c)];
        mag += std::fabs(w * x[size_t(j * cols + c)]);
      }
      ASSERT_NEAR(y[size_t(j * rows + r)], want, 1e-5 * mag + 1e-30)
          << isa << " W [" << rows << ", " << cols << "] k " << k << " axis " << axis << " n " << n
          << " row " << j << " out " << r;
    }
}

TEST(TrellisMatvec, MatchesDequantizedProduct) {
  ThreadPool pool(2);
  const auto isas = cpu::detail::trellis_matvec_isas();
  for (const auto& isa : isas) {
    // Every n on the family in use; the fallbacks at the n that take each kernel branch.
    const std::vector<int64_t> ns = isa == isas.front()
                                        ? std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}
                                        : std::vector<int64_t>{1, 7, 8};
    for (int k = 2; k <= 4; ++k)
      for (int64_t odd : {1, 17, 33, 300})
        for (int64_t coded : {256, 512, 768})
          for (int64_t n : ns) {
            expect_matvec_matches(isa, odd, coded, k, 1, n, pool);
            expect_matvec_matches(isa, coded, odd, k, 0, n, pool);
          }
    expect_matvec_matches(isa, 40, 1024, 3, 1, 11, pool);  // n > 8 runs in chunks
    expect_matvec_matches(isa, 1024, 40, 3, 0, 11, pool);
  }
  EXPECT_EQ(cpu::trellis_matvec_isa(), cpu::detail::trellis_matvec_isas().front());
}

TEST(TrellisErrors, NameTheBadParameter) {
  std::vector<float> w(2 * 300, 1.0f);
  std::vector<uint32_t> codes(1024);
  std::vector<uint16_t> scales(4);
  EXPECT_NE(error_of([&] {
              quantize_trellis_rows(w.data(), 2, 300, 3, codes.data(), scales.data(), nullptr);
            }).find("multiple of 256"),
            std::string::npos);
  for (int k : {1, 5}) {
    EXPECT_NE(error_of([&] {
                quantize_trellis_rows(w.data(), 1, 256, k, codes.data(), scales.data(), nullptr);
              }).find("trellis bits must be 2, 3 or 4, got " + std::to_string(k)),
              std::string::npos);
    EXPECT_NE(error_of([&] { TrellisEncoder enc(k); }).find("bits"), std::string::npos);
  }
  ThreadPool pool(1);
  std::vector<float> x(300), y(300);
  EXPECT_NE(error_of([&] {
              cpu::trellis_matvec(codes.data(), scales.data(), 2, 300, 3, 1, x.data(), 1, y.data(),
                                  pool);
            }).find("multiple of 256"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              cpu::trellis_matvec(codes.data(), scales.data(), 300, 2, 3, 0, x.data(), 1, y.data(),
                                  pool);
            }).find("output dim a multiple of 256"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              cpu::trellis_matvec(codes.data(), scales.data(), 1, 256, 6, 1, x.data(), 1, y.data(),
                                  pool);
            }).find("trellis bits"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              cpu::trellis_matvec(codes.data(), scales.data(), 1, 256, 3, 2, x.data(), 1, y.data(),
                                  pool);
            }).find("axis must be 0 or 1"),
            std::string::npos);
  std::vector<float> inf_row(256, 1.0f);
  inf_row[7] = INFINITY;
  EXPECT_NE(error_of([&] {
              quantize_trellis_rows(inf_row.data(), 1, 256, 3, codes.data(), scales.data(),
                                    nullptr);
            }).find("row 0"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth::quant
