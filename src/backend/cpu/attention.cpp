// Causal softmax attention over the ring-addressed KV cache. Scores and softmax are f32, as in
// the reference (eager attention in float32).
// Work unit: one token × one KV head, covering the `group` query heads that share that KV head
// (GQA), so every cached K and V row is read once per group rather than once per query head.
// Units are handed out dynamically (an atomic counter): under a causal mask later tokens see
// more keys, so a static split would leave one thread with most of the work.
// The inner loops (dot products, weighted sums) use AVX-512 when the CPU has it.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/gdn_simd.h"
#include "backend/cpu/ops.h"

namespace hearth::cpu {

namespace {

struct Unit {
  const float* q;  // [group, head_dim]: the query heads of this unit
  float* out;      // [group, head_dim]
  int64_t pos;
  int kv_head;
};

using DotFn = float (*)(const float*, const float*, int);
using AxpyFn = void (*)(float*, const float*, float, int);

// Portable: 8 partial sums so the loop vectorises without reassociation flags.
float dot_portable(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
void axpy_portable(float* y, const float* x, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float dot_avx512(const float* a, const float* b, int n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16)
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  // Horizontal sum through memory (GCC 12 warns spuriously inside the 512→256 extract helpers).
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(acc0, acc1));
  float sum = 0.0f;
  for (int j = 0; j < 8; ++j) sum += lanes[j] + lanes[j + 8];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
__attribute__((target("avx512f"))) void axpy_avx512(float* y, const float* x, float a, int n) {
  const __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}
#endif

struct Kernels {
  DotFn dot = dot_portable;
  AxpyFn axpy = axpy_portable;
};

const Kernels& kernels() {
  static const Kernels k = [] {
    Kernels r;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
      r.dot = dot_avx512;
      r.axpy = axpy_avx512;
    }
#endif
    return r;
  }();
  return k;
}

void attend_unit(const Unit& u, const KvView& kv, const AttentionParams& p, int group,
                 std::vector<float>& scores, const Kernels& kn) {
  int64_t lo = kv.first;
  if (p.window > 0) lo = std::max<int64_t>(lo, u.pos - p.window + 1);
  const int64_t hi = std::min<int64_t>(u.pos, kv.end - 1);
  const int64_t n = hi - lo + 1;
  const int hd = p.head_dim;
  const int64_t row = int64_t(p.n_head_kv) * hd;
  std::fill(u.out, u.out + int64_t(group) * hd, 0.0f);
  if (n <= 0) return;
  scores.resize(size_t(n * group));
  // Pass 1: scores for every query head of the group, each K row read once.
  const int64_t head = int64_t(u.kv_head) * hd;
  kv.for_each_run(lo, n, [&](int64_t p0, int64_t count, std::byte* keys, std::byte*) {
    const float* k = reinterpret_cast<const float*>(keys) + head;
    for (int64_t i = p0 - lo, last = i + count; i < last; ++i, k += row)
      for (int g = 0; g < group; ++g) {
        float s = kn.dot(u.q + int64_t(g) * hd, k, hd) * p.scale;
        if (p.softcap > 0.0f) s = std::tanh(s / p.softcap) * p.softcap;
        scores[size_t(g * n + i)] = s;
      }
  });
  // Softmax per head.
  for (int g = 0; g < group; ++g) {
    float* s = scores.data() + g * n;
    const float max_score = *std::max_element(s, s + n);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      s[i] = std::exp(s[i] - max_score);
      sum += s[i];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) s[i] *= inv_sum;
  }
  // Pass 2: weighted sum of V rows, each read once.
  kv.for_each_run(lo, n, [&](int64_t p0, int64_t count, std::byte*, std::byte* values) {
    const float* v = reinterpret_cast<const float*>(values) + head;
    for (int64_t i = p0 - lo, last = i + count; i < last; ++i, v += row)
      for (int g = 0; g < group; ++g)
        kn.axpy(u.out + int64_t(g) * hd, v, scores[size_t(g * n + i)], hd);
  });
}

// Prefill tiles: up to 16 query rows (consecutive tokens × the query heads of one KV head)
// against all the keys any of them sees, as two small matrix products with the rows in vector
// lanes. Scores: Q is transposed once per tile (Qt [head_dim][16]); each key's row is broadcast
// element by element against Qt, 8 keys at a time, giving the 16 rows' scores of a key in one
// vector (Sᵀ [keys][16]). Softmax then runs down the keys for all rows at once (masked per row:
// causal, window). Values: for each 16-dim slice of the head, each V row's slice is loaded once
// and multiplied by 16 broadcast probabilities. Every K and V element is read once per tile
// instead of once per token.
constexpr int kTileRows = 16;

struct Tile {
  int64_t t0;  // first token
  int tokens;  // consecutive tokens; rows = tokens × group ≤ 16
  int kv_head;
};

// Softmax of st [n][16] down the keys, lane r over keys [first[r], last[r]] (the others get 0;
// a lane with no key is all zero). Each row's sum runs over its keys in order, as attend_unit's
// does; exp is gdn::exp16 (within 2 ulp of expf). Always inlined, like gdn_simd.h's helpers, so
// it compiles under attend_tile's AVX-512 target and no 64-byte vector crosses a call.
GDN_INLINE void tile_softmax(float* st, int64_t n, const float* first_r, const float* last_r) {
  using gdn::v16;
  const v16 first = gdn::load16(first_r), last = gdn::load16(last_r);
  const v16 minus_inf = gdn::splat16(-INFINITY), zero{};
  v16 max_score = minus_inf;
  for (int64_t i = 0; i < n; ++i) {
    const v16 key = gdn::splat16(float(i));
    v16 sv = gdn::load16(st + i * kTileRows);
    sv = key >= first && key <= last ? sv : minus_inf;
    gdn::store16(st + i * kTileRows, sv);
    max_score = sv > max_score ? sv : max_score;
  }
  max_score = max_score == minus_inf ? zero : max_score;  // a row that sees no key: all zero
  v16 sum{};
  for (int64_t i = 0; i < n; ++i) {
    const v16 e = gdn::exp16(gdn::load16(st + i * kTileRows) - max_score);  // e^-inf = 0
    gdn::store16(st + i * kTileRows, e);
    sum += e;
  }
  const v16 inv_sum = sum > zero ? 1.0f / sum : zero;
  for (int64_t i = 0; i < n; ++i)
    gdn::store16(st + i * kTileRows, gdn::load16(st + i * kTileRows) * inv_sum);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void attend_tile(const Tile& tile, const Tensor& out,
                                                    const Tensor& q, const KvView& kv,
                                                    const int32_t* positions,
                                                    const AttentionParams& p, int group,
                                                    std::vector<float>& buffer,
                                                    std::vector<const float*>& rows_of) {
  const int hd = p.head_dim, rows = tile.tokens * group;
  const int64_t kv_row = int64_t(p.n_head_kv) * hd;
  int64_t lo_r[kTileRows], hi_r[kTileRows];
  const float* q_r[kTileRows];
  float* out_r[kTileRows];
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int r = 0; r < rows; ++r) {
    const int64_t t = tile.t0 + r / group;
    const int64_t offset = (t * p.n_head + int64_t(tile.kv_head) * group + r % group) * hd;
    q_r[r] = q.as<const float>() + offset;
    out_r[r] = out.as<float>() + offset;
    const int64_t pos = positions[t];
    lo_r[r] = p.window > 0 ? std::max<int64_t>(kv.first, pos - p.window + 1) : kv.first;
    hi_r[r] = std::min<int64_t>(pos, kv.end - 1);
    std::fill(out_r[r], out_r[r] + hd, 0.0f);
    if (hi_r[r] >= lo_r[r]) lo = std::min(lo, lo_r[r]), hi = std::max(hi, hi_r[r]);
  }
  if (hi < lo) return;  // no row sees a key
  const int64_t n = hi - lo + 1, n4 = (n + 3) / 4 * 4;
  buffer.resize(size_t(hd * kTileRows + n4 * kTileRows));
  float* qt = buffer.data();        // [hd][16]
  float* st = qt + hd * kTileRows;  // [n4][16]: scores, then probabilities
  for (int d = 0; d < hd; ++d)
    for (int r = 0; r < kTileRows; ++r) qt[d * kTileRows + r] = r < rows ? q_r[r][d] : 0.0f;
  // The tile's keys' and values' rows (this KV head's part), looked up once.
  rows_of.resize(size_t(2 * n));
  const float** key_rows = rows_of.data();
  const float** value_rows = key_rows + n;
  const int64_t head = int64_t(tile.kv_head) * hd;
  kv.for_each_run(lo, n, [&](int64_t p0, int64_t count, std::byte* keys, std::byte* values) {
    for (int64_t j = 0; j < count; ++j) {
      key_rows[p0 - lo + j] = reinterpret_cast<const float*>(keys) + j * kv_row + head;
      value_rows[p0 - lo + j] = reinterpret_cast<const float*>(values) + j * kv_row + head;
    }
  });

  // Scores, 8 keys at a time: 8 independent FMA chains keep both of a core's FMA pipes busy
  // (a missing key repeats the last one; its column is unused).
  constexpr int kKeys = 8;
  for (int64_t i = 0; i < n; i += kKeys) {
    const float* k[kKeys];
    for (int j = 0; j < kKeys; ++j) k[j] = key_rows[std::min(i + j, n - 1)];
    __m512 acc[kKeys];
    for (int j = 0; j < kKeys; ++j) acc[j] = _mm512_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m512 qv = _mm512_loadu_ps(qt + d * kTileRows);
      for (int j = 0; j < kKeys; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[j][d]), acc[j]);
    }
    for (int j = 0; j < kKeys && i + j < n; ++j)
      _mm512_storeu_ps(st + (i + j) * kTileRows, _mm512_mul_ps(acc[j], _mm512_set1_ps(p.scale)));
  }
  if (p.softcap > 0.0f)
    for (int64_t i = 0; i < n * kTileRows; ++i) st[i] = std::tanh(st[i] / p.softcap) * p.softcap;
  // Softmax down the keys for the 16 rows at once, a row per lane (rows past `rows` see no key).
  float first[kTileRows], last[kTileRows];
  for (int r = 0; r < kTileRows; ++r) {
    first[r] = r < rows ? float(lo_r[r] - lo) : 1.0f;
    last[r] = r < rows ? float(hi_r[r] - lo) : 0.0f;
  }
  tile_softmax(st, n, first, last);
  // Values, one 16-wide slice of the head at a time.
  for (int c = 0; c < hd; c += 16) {
    __m512 acc[kTileRows];
    for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m512 v = _mm512_loadu_ps(value_rows[i] + c);
      const float* pi = st + i * kTileRows;
      for (int r = 0; r < kTileRows; ++r)
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(pi[r]), v, acc[r]);
    }
    for (int r = 0; r < rows; ++r) _mm512_storeu_ps(out_r[r] + c, acc[r]);
  }
}
#endif

// Whether prefill runs in tiles: AVX-512, head_dim a multiple of 16, a group of at most 16
// query heads, and more than one token.
bool tiles_apply(int64_t n_tokens, const AttentionParams& p, int group) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && n_tokens > 1 && p.head_dim % 16 == 0 && group <= kTileRows;
#else
  (void)n_tokens, (void)p, (void)group;
  return false;
#endif
}

}  // namespace

void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
               const AttentionParams& p, ThreadPool& pool, bool batch_invariant) {
  const int64_t n_tokens = q.dim(0);
  const int group = p.n_head / p.n_head_kv;
#if defined(__x86_64__)
  if (!batch_invariant && tiles_apply(n_tokens, p, group)) {
    const int tokens_per_tile = kTileRows / group;
    const int64_t tiles_per_head = (n_tokens + tokens_per_tile - 1) / tokens_per_tile;
    const int64_t n_tiles = tiles_per_head * p.n_head_kv;
    auto tile_at = [&](int64_t index) {
      // Latest tokens first: they have the most keys, so the tail of the schedule is short.
      const int64_t t0 = (tiles_per_head - 1 - index / p.n_head_kv) * tokens_per_tile;
      return Tile{t0, int(std::min<int64_t>(tokens_per_tile, n_tokens - t0)),
                  int(index % p.n_head_kv)};
    };
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
      thread_local std::vector<float> buffer;
      thread_local std::vector<const float*> rows_of;
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_tiles;
           i = next.fetch_add(1, std::memory_order_relaxed))
        attend_tile(tile_at(i), out, q, kv, positions, p, group, buffer, rows_of);
    });
    return;
  }
#endif
  const int64_t units = n_tokens * p.n_head_kv;
  const Kernels& kn = kernels();
  auto unit_at = [&](int64_t index) {
    // Latest tokens first: they have the most keys, so the tail of the schedule is short.
    const int64_t t = n_tokens - 1 - index / p.n_head_kv;
    const int kv_head = int(index % p.n_head_kv);
    const int64_t offset = (t * p.n_head + int64_t(kv_head) * group) * p.head_dim;
    return Unit{q.as<const float>() + offset, out.as<float>() + offset, positions[t], kv_head};
  };
  if (units == 1 || pool.size() == 1) {
    thread_local std::vector<float> scores;
    for (int64_t i = 0; i < units; ++i) attend_unit(unit_at(i), kv, p, group, scores, kn);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> scores;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < units;
         i = next.fetch_add(1, std::memory_order_relaxed))
      attend_unit(unit_at(i), kv, p, group, scores, kn);
  });
}

}  // namespace hearth::cpu
