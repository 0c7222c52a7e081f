// Times the Gated DeltaNet op alone, chunked vs recurrent, at Qwen3.5-0.8B's linear-layer shape
// (16 key / 16 value heads of 128) for a prefill of N tokens: bench_gated_delta [N] [reps].
// Prints the best of `reps` calls and the FLOP rate of each form's own FLOP count.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gated_delta.h"

using namespace hearth;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 512, reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int hk = 16, hv = 16, dk = 128, dv = 128, row = 2 * hk * dk + hv * dv;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(size_t(n) * row), g(size_t(n) * hv), beta(g.size()),
      out(size_t(n) * hv * dv), state(size_t(hv) * dk * dv);
  for (auto& x : qkv) x = normal(rng);
  for (size_t i = 0; i < g.size(); ++i) {
    // Decays as in the random 0.8B checkpoint: -A·softplus(a), A in [1, 16] (strong forgetting).
    g[i] = -(1.0f + 15.0f * float(i % hv) / float(hv - 1)) * std::log1p(std::exp(normal(rng)));
    beta[i] = 1.0f / (1.0f + std::exp(-normal(rng)));
  }
  auto be = make_cpu_backend();
  std::printf("gated_delta kernels: %s; n=%d, Hv=%d, Dk=Dv=%d\n", cpu::gated_delta_isa(), n, hv,
              dk);
  for (bool chunked : {true, false}) {
    double best = 1e9;
    for (int r = 0; r < reps; ++r) {
      std::fill(state.begin(), state.end(), 0.0f);
      auto t0 = std::chrono::steady_clock::now();
      be->gated_delta(
          Tensor(out.data(), DType::F32, {n, hv, dv}), Tensor(qkv.data(), DType::F32, {n, row}),
          Tensor(g.data(), DType::F32, {n, hv}), Tensor(beta.data(), DType::F32, {n, hv}),
          Tensor(state.data(), DType::F32, {hv, dk, dv}),
          GatedDeltaParams{hk, hv, dk, dv, chunked, 64});
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // FLOPs each form needs. Recurrence: 8·Dk·Dv per token-head (decay, Sᵀk, rank-1 update,
    // Sᵀq). Chunked, per chunk of C tokens and head, counting only the lower halves of the
    // triangular products: QKᵀ and KKᵀ (C²·Dk), T·[βV | βK] (C²/2·(Dv+Dk)), W·S, Q·S and Kᵀ·V'
    // (3·C·Dk·Dv), P·V' (C²/2·Dv), two FLOPs per FMA.
    const double C = 64, chunks = std::ceil(n / C);
    const double flops =
        chunked ? 2.0 * chunks * hv *
                      (C * C * dk + C * C / 2 * (dv + dk) + 3 * C * dk * dv + C * C / 2 * dv)
                : 8.0 * dk * dv * double(n) * hv;
    std::printf("%-9s %8.2f ms  %6.2f GFLOP  %6.1f GFLOP/s\n", chunked ? "chunked" : "recurrent",
                best * 1e3, flops * 1e-9, flops / best * 1e-9);
  }
}
