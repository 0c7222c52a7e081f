// The trellis encoder: tail-biting Viterbi over the 4096 states of the L = 12 bitshift trellis
// (QTIP Algorithm 4). A state's predecessors are (n >> k) + m·2^(12-k), m < 2^k, so all 2^k
// states n = j·2^k + b share the predecessor set of j: each step is a min over 2^k contiguous
// arrays of length 2^(12-k) (one backpointer per j, not per state) and a broadcast add.
// Costs are f32 ≥ 0 kept as their bit patterns, which order like the floats; the low k mantissa
// bits are cleared and hold the predecessor index m while taking the min, so one unsigned min
// gives cost and argmin at once (a relative perturbation below 2^-19, immaterial to the MSE).
// The step is compiled for AVX-512, AVX2 and baseline x86-64 and picked once at run time.
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/trellis.h"

namespace hearth::quant {

namespace {

using Spec = TrellisSpec;
constexpr int kT = Spec::kBlock;
constexpr int kStates = Spec::kStates;
constexpr float kForbidden = 1e30f;  // cost of a disallowed start state; stays finite when summed

// One forward pass over x[0..255]. cost: [4096] f32 bits (in: ignored, out: final costs);
// bp: [256, 2^(12-k)] backpointers m (row 0 unused). start_overlap >= 0 allows only the start
// states n with n >> k == start_overlap.
template <int K>
[[gnu::always_inline]] inline void viterbi_forward(const float* __restrict x,
                                                   const float* __restrict code,
                                                   uint32_t* __restrict cost,
                                                   uint32_t* __restrict mins,
                                                   uint8_t* __restrict bp, int start_overlap) {
  constexpr int S = kStates >> K, B = 1 << K;
  constexpr uint32_t kLow = B - 1;
  for (int n = 0; n < kStates; ++n) {
    const float d = x[0] - code[n];
    cost[n] = std::bit_cast<uint32_t>(d * d) & ~kLow;
  }
  if (start_overlap >= 0) {
    for (int n = 0; n < kStates; ++n)
      if ((n >> K) != start_overlap) cost[n] = std::bit_cast<uint32_t>(kForbidden);
  }
  for (int t = 1; t < kT; ++t) {
    uint8_t* __restrict bpt = bp + t * S;
    // Best predecessor of each j: the key cost|m makes the unsigned min carry its argmin.
    for (int j = 0; j < S; ++j) mins[j] = cost[j];
    for (int m = 1; m < B; ++m) {
      const uint32_t* __restrict cm = cost + m * S;
      for (int j = 0; j < S; ++j) mins[j] = std::min(mins[j], cm[j] | uint32_t(m));
    }
    for (int j = 0; j < S; ++j) bpt[j] = uint8_t(mins[j] & kLow);
    const float xt = x[t];
    for (int j = 0; j < S; ++j) {
      const float base = std::bit_cast<float>(mins[j] & ~kLow);
      for (int b = 0; b < B; ++b) {
        const float d = xt - code[j * B + b];
        cost[j * B + b] = std::bit_cast<uint32_t>(base + d * d) & ~kLow;
      }
    }
  }
}

using ForwardFn = void (*)(const float*, const float*, uint32_t*, uint32_t*, uint8_t*, int);

#define HEARTH_TRELLIS_FORWARD(name, K, attrs)                                                    \
  attrs void name(const float* x, const float* code, uint32_t* cost, uint32_t* mins, uint8_t* bp, \
                  int start_overlap) {                                                            \
    viterbi_forward<K>(x, code, cost, mins, bp, start_overlap);                                   \
  }

HEARTH_TRELLIS_FORWARD(forward_k2_base, 2, )
HEARTH_TRELLIS_FORWARD(forward_k3_base, 3, )
HEARTH_TRELLIS_FORWARD(forward_k4_base, 4, )
#if defined(__x86_64__)
#define HEARTH_AVX2 [[gnu::target("avx2,fma")]]
#if defined(__clang__)
#define HEARTH_AVX512 [[gnu::target("avx512f,avx512bw,avx512vl,fma")]]
#else
// GCC's generic tuning keeps AVX-512 code at 256-bit vectors unless asked.
#define HEARTH_AVX512 [[gnu::target("avx512f,avx512bw,avx512vl,fma,prefer-vector-width=512")]]
#endif
HEARTH_TRELLIS_FORWARD(forward_k2_avx2, 2, HEARTH_AVX2)
HEARTH_TRELLIS_FORWARD(forward_k3_avx2, 3, HEARTH_AVX2)
HEARTH_TRELLIS_FORWARD(forward_k4_avx2, 4, HEARTH_AVX2)
HEARTH_TRELLIS_FORWARD(forward_k2_avx512, 2, HEARTH_AVX512)
HEARTH_TRELLIS_FORWARD(forward_k3_avx512, 3, HEARTH_AVX512)
HEARTH_TRELLIS_FORWARD(forward_k4_avx512, 4, HEARTH_AVX512)
#endif

// Kernel families, best first.
enum class EncoderIsa { Avx512, Avx2, Generic };
constexpr const char* kIsaNames[] = {"avx512", "avx2", "generic"};

bool encoder_isa_supported(EncoderIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == EncoderIsa::Avx2) return avx2;
  if (isa == EncoderIsa::Avx512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#endif
  return isa == EncoderIsa::Generic;
}

EncoderIsa best_encoder_isa() {
  static const EncoderIsa best = [] {
    for (EncoderIsa isa : {EncoderIsa::Avx512, EncoderIsa::Avx2})
      if (encoder_isa_supported(isa)) return isa;
    return EncoderIsa::Generic;
  }();
  return best;
}

ForwardFn forward_for(EncoderIsa isa, int k) {
  const int i = k - Spec::kMinBits;
#if defined(__x86_64__)
  static constexpr ForwardFn avx512[] = {forward_k2_avx512, forward_k3_avx512, forward_k4_avx512};
  static constexpr ForwardFn avx2[] = {forward_k2_avx2, forward_k3_avx2, forward_k4_avx2};
  if (isa == EncoderIsa::Avx512) return avx512[i];
  if (isa == EncoderIsa::Avx2) return avx2[i];
#endif
  static constexpr ForwardFn base[] = {forward_k2_base, forward_k3_base, forward_k4_base};
  return base[i];
}

}  // namespace

const char* trellis_encoder_isa() { return kIsaNames[int(best_encoder_isa())]; }

std::vector<std::string> trellis_encoder_isas() {
  std::vector<std::string> out;
  for (EncoderIsa isa : {EncoderIsa::Avx512, EncoderIsa::Avx2, EncoderIsa::Generic})
    if (encoder_isa_supported(isa)) out.push_back(kIsaNames[int(isa)]);
  return out;
}

struct TrellisEncoder::Scratch {
  ForwardFn forward = nullptr;
  alignas(64) uint32_t cost[kStates];
  alignas(64) uint32_t mins[kStates];
  alignas(64) float x_rot[kT];
  uint16_t path[kT];
  uint8_t sym[kT];
  std::vector<uint8_t> bp;  // [256, 2^(12-k)]
};

TrellisEncoder::TrellisEncoder(int k, std::string_view isa)
    : k_(k), s_(std::make_unique<Scratch>()) {
  trellis_check_bits(k, "TrellisEncoder");
  EncoderIsa chosen = best_encoder_isa();
  if (!isa.empty()) {
    int i = 0;
    while (i < 3 && isa != kIsaNames[i]) ++i;
    if (i == 3 || !encoder_isa_supported(EncoderIsa(i)))
      fail("TrellisEncoder: kernel family '{}' is unknown or not supported by this CPU", isa);
    chosen = EncoderIsa(i);
  }
  s_->forward = forward_for(chosen, k);
  s_->bp.resize(size_t(kT) * size_t(kStates >> k));
}

TrellisEncoder::~TrellisEncoder() = default;

namespace {

// Follows the backpointers from end state n back to t = 0, filling path[0..255].
void trace_back(const uint8_t* bp, int k, int n, uint16_t* path) {
  const int S = kStates >> k;
  path[kT - 1] = uint16_t(n);
  for (int t = kT - 1; t > 0; --t) {
    const int j = n >> k;
    n = bp[t * S + j] * S + j;
    path[t - 1] = uint16_t(n);
  }
}

// The cheapest final state; end_overlap >= 0 allows only n with n % 2^(12-k) == end_overlap.
int best_end_state(const uint32_t* cost, int k, int end_overlap) {
  const int S = kStates >> k;
  int best = end_overlap >= 0 ? end_overlap : 0;
  const int step = end_overlap >= 0 ? S : 1;
  for (int n = best + step; n < kStates; n += step)
    if (cost[n] < cost[best]) best = n;
  return best;
}

}  // namespace

double TrellisEncoder::encode_block(const float* x, uint32_t* words) {
  Scratch& s = *s_;
  const int k = k_;
  const float* code = trellis_1mad_table();
  // Pass 1: the sequence rotated by T/2 puts the block's wrap-around in the middle, where an
  // unconstrained path crosses it freely; the state there fixes the shared bits ("overlap")
  // of the true start and end states.
  for (int t = 0; t < kT; ++t) s.x_rot[t] = x[(t + kT / 2) % kT];
  s.forward(s.x_rot, code, s.cost, s.mins, s.bp.data(), -1);
  trace_back(s.bp.data(), k, best_end_state(s.cost, k, -1), s.path);
  const int overlap = s.path[kT / 2] >> k;  // x_rot[T/2] is x[0]
  // Pass 2: the real sequence, with start and end states restricted so the path bites its tail:
  // state_0 >> k == overlap == state_255 mod 2^(12-k).
  s.forward(x, code, s.cost, s.mins, s.bp.data(), overlap);
  trace_back(s.bp.data(), k, best_end_state(s.cost, k, overlap), s.path);
  double err = 0;
  for (int t = 0; t < kT; ++t) {
    s.sym[t] = uint8_t(s.path[t] & ((1 << k) - 1));
    const double d = double(x[t]) - code[s.path[t]];
    err += d * d;
  }
  trellis_pack_block(s.sym, k, words);
  return err;
}

}  // namespace hearth::quant
