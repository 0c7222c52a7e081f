// CPU attention (src/backend/cpu/attention.cpp) against a double-precision reference: prefill
// tiles (AVX-512, head_dim a multiple of 16) and the per-token path alike, at GQA groups 1-16,
// head dims 48 (the per-token path) 64 and 128, 1-33 new tokens after cached ones, a ring-addressed
// cache that has wrapped, the same caches paged (blocks out of order, freed ones), sliding windows
// and logit soft-capping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace hearth {
namespace {

struct Case {
  int n_head, n_head_kv, head_dim;
  int64_t cached, n_new, capacity;
  int window = 0;
  float softcap = 0.0f;
};

// out[t, h] = softmax over visible keys of (q·k)·scale (soft-capped), times V, in f64.
std::vector<double> reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<int32_t>& pos, int64_t first, int64_t end,
                              float scale) {
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
  const int64_t row = int64_t(c.n_head_kv) * hd;
  std::vector<double> out(size_t(c.n_new * c.n_head * hd), 0.0);
  for (int64_t t = 0; t < c.n_new; ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const int kvh = h / group;
      int64_t lo = first;
      if (c.window > 0) lo = std::max<int64_t>(lo, pos[size_t(t)] - c.window + 1);
      const int64_t hi = std::min<int64_t>(pos[size_t(t)], end - 1);
      if (hi < lo) continue;
      std::vector<double> s(size_t(hi - lo + 1));
      double mx = -INFINITY;
      for (int64_t i = lo; i <= hi; ++i) {
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += double(q[size_t((t * c.n_head + h) * hd + e)]) *
               k[size_t((i % c.capacity) * row + kvh * hd + e)];
        d *= scale;
        if (c.softcap > 0) d = std::tanh(d / c.softcap) * c.softcap;
        s[size_t(i - lo)] = d;
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = lo; i <= hi; ++i)
        for (int e = 0; e < hd; ++e)
          out[size_t((t * c.n_head + h) * hd + e)] +=
              s[size_t(i - lo)] / sum * v[size_t((i % c.capacity) * row + kvh * hd + e)];
    }
  return out;
}

// The ring's valid positions as a paged view: blocks of `block` positions in reverse order in one
// arena, the layer second of two in each block (its keys at 2·block rows in, its values at
// 3·block), blocks wholly before `first` absent from the table.
struct PagedCopy {
  std::vector<float> arena;
  std::vector<std::byte*> table;
  KvView view;
};
void page(PagedCopy& out, const std::vector<float>& k, const std::vector<float>& v, int64_t row,
          int64_t capacity, int64_t first, int64_t end, int64_t block) {
  const int64_t n_blocks = (end + block - 1) / block, block_floats = 4 * block * row;
  out.arena.assign(size_t(n_blocks * block_floats), NAN);
  out.table.assign(size_t(n_blocks), nullptr);
  for (int64_t b = first / block; b < n_blocks; ++b)
    out.table[size_t(b)] =
        reinterpret_cast<std::byte*>(out.arena.data() + (n_blocks - 1 - b) * block_floats);
  const int64_t row_bytes = row * int64_t(sizeof(float));
  KvView& kv = out.view;
  kv.first = first;
  kv.end = end;
  kv.blocks = out.table.data();
  kv.block_size = block;
  kv.row_bytes = row_bytes;
  kv.k_offset = 2 * block * row_bytes;
  kv.v_offset = 3 * block * row_bytes;
  for (int64_t p = first; p < end; ++p) {
    std::byte* at = out.table[size_t(p / block)] + (p % block) * row_bytes;
    std::memcpy(at + kv.k_offset, k.data() + (p % capacity) * row, size_t(row_bytes));
    std::memcpy(at + kv.v_offset, v.data() + (p % capacity) * row, size_t(row_bytes));
  }
}

// block > 0: the cache is read through a paged view of blocks of that many positions.
void check(const Case& c, uint32_t seed, int64_t block = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hd = c.head_dim;
  const int64_t row = int64_t(c.n_head_kv) * hd;
  std::vector<float> q(size_t(c.n_new * c.n_head * hd)), k(size_t(c.capacity * row)), v(k.size()),
      out(q.size(), NAN);
  for (auto& x : q) x = normal(rng);
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  std::vector<int32_t> pos(static_cast<size_t>(c.n_new));
  for (int64_t t = 0; t < c.n_new; ++t) pos[size_t(t)] = int32_t(c.cached + t);
  const int64_t end = c.cached + c.n_new;
  const int64_t first = std::max<int64_t>(0, end - c.capacity);  // the ring keeps the latest
  KvView kv{Tensor(k.data(), DType::F32, {c.capacity, row}),
            Tensor(v.data(), DType::F32, {c.capacity, row}), c.capacity, first, end};
  PagedCopy paged;
  if (block > 0) {
    page(paged, k, v, row, c.capacity, first, end, block);
    kv = paged.view;
  }
  AttentionParams p{c.n_head, c.n_head_kv, hd, 1.0f / std::sqrt(float(hd)), c.softcap, c.window};
  ThreadPool pool(3);
  cpu::attention(Tensor(out.data(), DType::F32, {c.n_new, int64_t(c.n_head) * hd}),
                 Tensor(q.data(), DType::F32, {c.n_new, int64_t(c.n_head) * hd}), kv, pos.data(), p,
                 pool);
  const std::vector<double> want = reference(c, q, k, v, pos, first, end, p.scale);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
        << "heads " << c.n_head << "/" << c.n_head_kv << " hd " << hd << " new " << c.n_new
        << " cached " << c.cached << " window " << c.window << " softcap " << c.softcap << " block "
        << block << " at " << i;
}

TEST(CpuAttention, MatchesDoublePrecisionReference) {
  uint32_t seed = 1;
  for (int hd : {48, 64, 128})
    for (auto [n_head, n_head_kv] : {std::pair{4, 4}, {8, 4}, {8, 2}, {16, 2}, {16, 1}})
      for (int64_t n_new : {1, 2, 7, 33}) check({n_head, n_head_kv, hd, 5, n_new, 64}, seed++);
}

TEST(CpuAttention, WrappedRingWindowAndSoftcap) {
  uint32_t seed = 100;
  // 70 cached + 21 new positions in a ring of 40: only the last 40 are kept.
  check({8, 2, 64, 70, 21, 40}, seed++);
  check({8, 2, 64, 0, 33, 64, 9}, seed++);          // sliding window of 9
  check({4, 1, 128, 3, 17, 64, 0, 30.0f}, seed++);  // soft-capped scores
  check({6, 3, 64, 10, 5, 64, 4, 50.0f}, seed++);   // both, group 2 of 3 KV heads
}

TEST(CpuAttention, PagedCachesMatchTheReference) {
  uint32_t seed = 200;
  for (int64_t block : {1, 5, 16, 64}) {
    check({8, 2, 64, 5, 1, 64}, seed++, block);             // decode
    check({8, 2, 64, 5, 33, 64}, seed++, block);            // prefill tiles
    check({8, 4, 48, 30, 7, 64}, seed++, block);            // the per-token path
    check({8, 2, 64, 70, 21, 40}, seed++, block);           // early blocks freed
    check({6, 3, 64, 10, 5, 64, 4, 50.0f}, seed++, block);  // window and soft-cap
  }
}

}  // namespace
}  // namespace hearth
