// `hearth quant-stats`: a weight format's distortion on i.i.d. N(0,1) samples (unit variance,
// so no scale is applied), next to the rate-distortion bound 2^(-2k) and the published figure,
// and the encoder's throughput. Each format is one function returning Stats; the table of
// reference figures and the printing are shared.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/affine.h"
#include "quant/trellis.h"

namespace hearth::cli {
namespace {

struct QuantStatsOptions {
  std::string format = "trellis";
  int bits = 3;
  int group_size = 64;  // affine
  int64_t samples = int64_t(1) << 20;
  uint32_t seed = 1;
  int threads = 0;  // 0: every available core
  std::string isa;  // encoder kernel family; empty: the best this CPU runs
};

struct Stats {
  std::string description;  // the format's parameters, one line
  double mse = 0;
  double seconds = 0;      // encoding only, wall clock
  double cpu_seconds = 0;  // encoding only, CPU time of all threads
  double published = 0;    // the reference MSE, 0 if none
  std::string published_source;
};

// N(0,1) by Box-Muller from mt19937, so a seed gives the same samples with any C++ library.
std::vector<float> normal_samples(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); i += 2) {
    const double u1 = (double(rng()) + 1.0) / 4294967296.0, u2 = double(rng()) / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = float(r * std::cos(2 * std::numbers::pi * u2));
    if (i + 1 < out.size()) out[i + 1] = float(r * std::sin(2 * std::numbers::pi * u2));
  }
  return out;
}

Stats trellis_stats(const QuantStatsOptions& o, const std::vector<float>& x, ThreadPool& pool) {
  using quant::TrellisSpec;
  quant::trellis_check_bits(o.bits, "--bits");
  if (o.samples % TrellisSpec::kBlock != 0)
    fail("--samples must be a multiple of {} for trellis, got {}", TrellisSpec::kBlock, o.samples);
  const int k = o.bits, words = TrellisSpec::block_words(k);
  const int64_t n_blocks = o.samples / TrellisSpec::kBlock;
  std::vector<uint32_t> codes(size_t(n_blocks * words));
  quant::TrellisEncoder probe(k, o.isa);  // a bad --isa fails here, not inside the pool
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  pool.parallel_for(n_blocks, 1, [&](int64_t b, int64_t e) {
    quant::TrellisEncoder encoder(k, o.isa);
    for (int64_t i = b; i < e; ++i)
      encoder.encode_block(&x[size_t(i * TrellisSpec::kBlock)], &codes[size_t(i * words)]);
  });
  Stats s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
  // The error of what was written, decoded independently of the encoder's own bookkeeping.
  double err = 0;
  float y[TrellisSpec::kBlock];
  for (int64_t i = 0; i < n_blocks; ++i) {
    quant::trellis_decode_block(&codes[size_t(i * words)], k, y);
    for (int t = 0; t < TrellisSpec::kBlock; ++t) {
      const double d = double(x[size_t(i * TrellisSpec::kBlock + t)]) - y[t];
      err += d * d;
    }
  }
  s.mse = err / double(o.samples);
  s.description = fmt::format("trellis {} L={} T={} k={} tail-biting, encoder {}",
                              TrellisSpec::kCode, TrellisSpec::kStateBits, TrellisSpec::kBlock, k,
                              o.isa.empty() ? std::string(quant::trellis_encoder_isa()) : o.isa);
  // QTIP (Tseng et al. 2024) Table 2: tail-biting trellis, L = 12, i.i.d. N(0,1).
  const double qtip[] = {0.0733, 0.0198, 0.0055};
  s.published = qtip[k - 2];
  s.published_source = "QTIP L=12 tail-biting";
  return s;
}

// MLX affine as `hearth quantize` writes it from bf16 weights: hearth's scale search, scales and
// biases rounded to bf16, codes recomputed for the rounded values. The reference is the textbook
// min/max quantizer (bias = the group's minimum, scale = its range / (2^bits − 1)) with the same
// bf16 parameters, computed here independently of src/quant.
Stats affine_stats(const QuantStatsOptions& o, const std::vector<float>& x, ThreadPool& pool) {
  if (!quant::affine_bits_supported(o.bits))
    fail("--bits must be 2, 3, 4, 5, 6 or 8 for affine, got {}", o.bits);
  if (!quant::affine_group_size_supported(o.group_size))
    fail("--group-size must be 32, 64 or 128 for affine, got {}", o.group_size);
  constexpr int64_t kRow = 4096;
  if (o.samples % kRow != 0)
    fail("--samples must be a multiple of {} for affine, got {}", kRow, o.samples);
  const int64_t rows = o.samples / kRow, groups = kRow / o.group_size;
  const auto bf16 = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  std::vector<double> err(static_cast<size_t>(rows)), ref_err(static_cast<size_t>(rows));
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  pool.parallel_for(rows, 1, [&](int64_t b, int64_t e) {
    std::vector<uint32_t> codes(static_cast<size_t>(quant::affine_words_per_row(kRow, o.bits)));
    std::vector<float> scales(static_cast<size_t>(groups)), biases(scales.size()),
        back(static_cast<size_t>(kRow));
    for (int64_t r = b; r < e; ++r) {
      const float* w = &x[size_t(r * kRow)];
      quant::affine_quantize_row(w, kRow, o.bits, o.group_size, codes.data(), scales.data(),
                                 biases.data());
      for (int64_t g = 0; g < groups; ++g) scales[g] = bf16(scales[g]), biases[g] = bf16(biases[g]);
      quant::affine_requantize_row(w, kRow, o.bits, o.group_size, scales.data(), biases.data(),
                                   codes.data());
      quant::affine_dequantize_row(codes.data(), scales.data(), biases.data(), kRow, o.bits,
                                   o.group_size, back.data());
      double sum = 0, ref = 0;
      for (int64_t i = 0; i < kRow; ++i) sum += (double(w[i]) - back[i]) * (double(w[i]) - back[i]);
      const float top = float((1 << o.bits) - 1);
      for (int64_t g = 0; g < groups; ++g) {
        const float* v = w + g * o.group_size;
        float lo = v[0], hi = v[0];
        for (int i = 1; i < o.group_size; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
        const float step = bf16((hi - lo) / top), base = bf16(lo);
        for (int i = 0; i < o.group_size; ++i) {
          const float q = std::clamp(std::nearbyint((v[i] - base) / step), 0.0f, top);
          ref += (double(v[i]) - (step * q + base)) * (double(v[i]) - (step * q + base));
        }
      }
      err[size_t(r)] = sum, ref_err[size_t(r)] = ref;
    }
  });
  Stats s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
  double total = 0, ref_total = 0;
  for (int64_t r = 0; r < rows; ++r) total += err[size_t(r)], ref_total += ref_err[size_t(r)];
  s.mse = total / double(o.samples);
  s.published = ref_total / double(o.samples);
  s.published_source = "min/max scale and bias, same bf16 parameters";
  s.description = fmt::format(
      "affine (MLX) bits={} group={} ({:.2f} bits per weight with bf16 "
      "scales and biases)",
      o.bits, o.group_size, o.bits + 32.0 / o.group_size);
  return s;
}

int run_quant_stats(const QuantStatsOptions& o) {
  if (o.samples <= 0) fail("--samples must be positive, got {}", o.samples);
  if (o.threads < 0) fail("--threads must be >= 0, got {}", o.threads);
  ThreadPool pool(o.threads);
  const auto x = normal_samples(o.samples, o.seed);
  Stats s;
  if (o.format == "trellis")
    s = trellis_stats(o, x, pool);
  else
    s = affine_stats(o, x, pool);
  const double bound = std::ldexp(1.0, -2 * o.bits);
  std::printf("format     %s\n", s.description.c_str());
  std::printf("samples    %lld N(0,1), seed %u, %d threads\n", (long long)o.samples, o.seed,
              pool.size());
  std::printf("mse        %.6f\n", s.mse);
  if (s.published > 0)
    std::printf("reference  %.6f  (%s; hearth %+.2f%%)\n", s.published, s.published_source.c_str(),
                100 * (s.mse / s.published - 1));
  std::printf("bound      %.6f  (2^-2k; hearth %+.2f%%)\n", bound, 100 * (s.mse / bound - 1));
  // Per CPU-second is the per-core speed even when other processes share the cores.
  std::printf("encoder    %.0f weights/s wall (%.2f s), %.0f weights per CPU-second\n",
              double(o.samples) / s.seconds, s.seconds, double(o.samples) / s.cpu_seconds);
  return 0;
}

CommandRegistration quant_stats_command(
    "quant-stats", "a weight format's MSE on N(0,1) samples against its bounds, and encoder speed",
    [](CLI::App& sub) {
      auto o = std::make_shared<QuantStatsOptions>();
      sub.add_option("--format", o->format, "weight format")
          ->check(CLI::IsMember({"trellis", "affine"}))
          ->capture_default_str();
      sub.add_option("--bits", o->bits, "bits per weight (trellis: 2, 3 or 4; affine 2-6 or 8)")
          ->capture_default_str();
      sub.add_option("--group-size", o->group_size, "affine: weights per scale and bias")
          ->capture_default_str();
      sub.add_option("--samples", o->samples, "number of N(0,1) samples")->capture_default_str();
      sub.add_option("--seed", o->seed, "random seed")->capture_default_str();
      sub.add_option("-t,--threads", o->threads, "threads (0: every available core)")
          ->capture_default_str();
      sub.add_option("--isa", o->isa,
                     "encoder kernel family (avx512, avx2, generic; default: best)");
      return CommandRun([o] { return run_quant_stats(*o); });
    });

}  // namespace
}  // namespace hearth::cli
