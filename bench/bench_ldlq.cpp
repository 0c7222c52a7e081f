// LDLQ against plain Viterbi on a real model's Hessians: captures H over a calibration text
// (runtime/calibration.h), then codes every linear module whose coded dim fits the 256-weight
// block on the axis `hearth quantize` gives it (or else on the other axis) both ways, and prints
// the relative output error tr(ΔW·H·ΔWᵀ) / tr(W·H·Wᵀ) of each, and the times.
//   bench_ldlq MODEL_DIR CALIB.txt [BITS=3] [TOKENS=8192]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "loader/weight_store.h"
#include "quant/ldlq.h"
#include "quant/quantize_format.h"
#include "quant/trellis.h"
#include "runtime/calibration.h"

using namespace hearth;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The weight [out, in] as f32 in the stored layout of `axis` (0: Wᵀ).
std::vector<float> stored_f32(const TensorInfo& t, int axis) {
  const int64_t out = t.shape[0], in = t.shape[1];
  std::vector<float> w(static_cast<size_t>(out * in));
  const auto* h = static_cast<const uint16_t*>(t.data);
  for (int64_t i = 0; i < out * in; ++i)
    w[size_t(i)] = t.dtype == DType::F32    ? static_cast<const float*>(t.data)[i]
                   : t.dtype == DType::BF16 ? bf16_to_f32(h[i])
                                            : f16_to_f32(h[i]);
  if (axis == 1) return w;
  std::vector<float> wt(w.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) wt[size_t(i * out + o)] = w[size_t(o * in + i)];
  return wt;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_ldlq MODEL_DIR CALIB.txt [BITS=3] [TOKENS=8192]\n");
    return 2;
  }
  const std::string model = argv[1], calib = argv[2];
  const int bits = argc > 3 ? std::stoi(argv[3]) : 3;
  CalibrationOptions options;
  options.n_tokens = argc > 4 ? std::stoll(argv[4]) : 8192;
  auto t0 = std::chrono::steady_clock::now();
  const CalibrationHessians hs = capture_hessians(model, calib, options);
  std::printf("capture: %lld tokens, %zu modules, %.1f MB of H, %.2f s\n", (long long)hs.tokens,
              hs.size(), double(hs.bytes) / 1e6, seconds_since(t0));

  const WeightStore store = WeightStore::open(model);
  ThreadPool& pool = ThreadPool::global();
  std::printf("%-48s %4s %11s %9s %9s %5s %7s\n", "module", "axis", "shape", "plain", "ldlq",
              "kept", "time s");
  double sum_plain = 0, sum_ldlq = 0, sum_ref = 0, total_s = 0;
  for (const auto& name : store.names()) {
    const TensorInfo* t = store.find(name);
    if (t->shape.size() != 2 || !name.ends_with(".weight")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    const int64_t out = t->shape[0], in = t->shape[1];
    const float* h = hs.find(module, in);
    if (!h) continue;
    int axis = quant::trellis_axis_for(module);
    if ((axis == 1 ? in : out) % 256 != 0) axis = 1 - axis;
    if ((axis == 1 ? in : out) % 256 != 0) continue;
    const int64_t rows = axis == 1 ? out : in, cols = axis == 1 ? in : out;
    const std::vector<float> w = stored_f32(*t, axis);
    // tr(W·H·Wᵀ): the output energy the errors are measured against.
    const double ref = quant::trellis_proxy_loss(w.data(), rows, cols, h, axis, &pool);
    std::vector<uint32_t> codes(
        static_cast<size_t>(rows * quant::TrellisSpec::row_words(cols, bits)));
    std::vector<uint16_t> scales(static_cast<size_t>(rows));
    t0 = std::chrono::steady_clock::now();
    const auto r = quant::quantize_trellis_rows_ldlq(w.data(), rows, cols, bits, h, axis,
                                                     codes.data(), scales.data(), &pool);
    const double s = seconds_since(t0);
    std::printf("%-48s %4d %5lldx%-5lld %9.5f %9.5f %5s %7.2f\n", module.c_str(), axis,
                (long long)out, (long long)in, r.proxy_plain / ref, r.proxy_ldlq / ref,
                r.used_ldlq ? "ldlq" : "plain", s);
    sum_plain += r.proxy_plain;
    sum_ldlq += r.used_ldlq ? r.proxy_ldlq : r.proxy_plain;
    sum_ref += ref;
    total_s += s;
  }
  if (sum_ref > 0)
    std::printf(
        "all: relative output error plain %.5f, with LDLQ (guarded) %.5f, %.2f s (plain "
        "Viterbi, LDL, LDLQ and both proxy losses)\n",
        sum_plain / sum_ref, sum_ldlq / sum_ref, total_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ldlq: %s\n", e.what());
    return 1;
  }
}
