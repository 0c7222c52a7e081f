// The CUDA backend's ops for steps of several sequences (one decode row each, each row on its
// own cache) against the CPU backend row by row: caches of different capacities and lengths,
// rings that wrapped, GQA groups, head dims 64/80/128/256, sliding windows, split-K lengths;
// and pick_tokens against pick_token on each row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#ifdef HEARTH_HAVE_CUDA
#include "cuda_test_util.h"

namespace hearth::test {
namespace {

class CudaRows : public CudaTest {
 protected:
  // One sequence's cache: `past` positions stored in a ring of `capacity`, random contents.
  struct Seq {
    Pair k, v;
    int64_t capacity = 0, past = 0;
    KvView gv() const { return {k.g, v.g, capacity, first(), past + 1}; }
    KvView cv() const { return {k.c, v.c, capacity, first(), past + 1}; }
    int64_t first() const { return std::max<int64_t>(0, past + 1 - capacity); }
  };
  Seq make_seq(int64_t capacity, int64_t past, int64_t row, uint32_t& seed) {
    Seq s;
    s.capacity = capacity;
    s.past = past;
    s.k = make({capacity, row}, randn(size_t(capacity * row), seed++));
    s.v = make({capacity, row}, randn(size_t(capacity * row), seed++));
    return s;
  }
};

struct RowsCase {
  int n_head, n_head_kv, hd, window;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (capacity, positions already stored)
};

const std::vector<RowsCase>& rows_cases() {
  static const std::vector<RowsCase> cases = {
      // Short and long caches side by side: the longest sets the split count, the others
      // leave their empty splits.
      {16, 8, 128, 0, {{256, 0}, {4096, 3000}, {512, 300}}},
      {8, 2, 64, 0, {{256, 17}, {256, 255}, {1024, 700}, {256, 5}, {2048, 2047}}},
      {16, 4, 256, 0, {{256, 100}, {512, 511}}},
      {8, 1, 128, 0, std::vector<std::pair<int64_t, int64_t>>(40, {256, 77})},  // many rows
      {8, 2, 80, 0, {{256, 3}, {256, 200}}},                                    // hd 80: no vec
      {8, 8, 64, 64, {{128, 300}, {96, 90}, {128, 40}}},  // sliding windows: rings that wrapped
  };
  return cases;
}

TEST_F(CudaRows, AttentionInputAndAttentionEqualEachRowAlone) {
  uint32_t seed = 900;
  for (const RowsCase& c : rows_cases()) {
    const int64_t n = int64_t(c.seqs.size()), row = int64_t(c.n_head_kv) * c.hd;
    std::vector<Seq> seqs;
    std::vector<int32_t> pos;
    for (const auto& [cap, past] : c.seqs) {
      seqs.push_back(make_seq(cap, past, row, seed));
      pos.push_back(int32_t(past));
    }
    std::vector<KvView> gv, cv;
    for (const Seq& s : seqs) gv.push_back(s.gv()), cv.push_back(s.cv());
    auto q = make({n, c.n_head, c.hd}, randn(size_t(n * c.n_head * c.hd), seed++));
    auto k = make({n, c.n_head_kv, c.hd}, randn(size_t(n * row), seed++));
    auto v = make({n, c.n_head_kv, c.hd}, randn(size_t(n * row), seed++));
    auto qn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    auto kn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    const int rotary = c.hd == 80 ? 64 : c.hd;  // 80: the composed form (pairs across lanes)
    std::vector<float> inv_freq(size_t(rotary / 2));
    for (int i = 0; i < rotary / 2; ++i)
      inv_freq[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(rotary));
    const RopeParams rp{inv_freq.data(), rotary, 1.0f};
    const std::string what = "heads " + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_head_kv) + " hd " + std::to_string(c.hd) +
                             " window " + std::to_string(c.window) + " rows " + std::to_string(n);

    gpu_->qk_norm_rope_store_rows(q.g, k.g, v.g, qn.g, kn.g, 1e-6f, 0.0f, &rp, gv.data(),
                                  pos.data());
    for (int64_t r = 0; r < n; ++r)
      cpu_->qk_norm_rope_store(q.c.slice_rows(r, r + 1), k.c.slice_rows(r, r + 1),
                               v.c.slice_rows(r, r + 1), qn.c, kn.c, 1e-6f, 0.0f, &rp,
                               cv[size_t(r)], pos.data() + r);
    expect_close(q, kBf16Tol, "q " + what);
    for (size_t s = 0; s < seqs.size(); ++s) {
      expect_close(seqs[s].k, kBf16Tol, "k cache of row " + std::to_string(s) + ", " + what);
      expect_close(seqs[s].v, kBf16Tol, "v cache of row " + std::to_string(s) + ", " + what);
    }

    const AttentionParams p{c.n_head, c.n_head_kv, c.hd, 1.0f / std::sqrt(float(c.hd)),
                            0.0f,     c.window};
    auto o = out({n, c.n_head, c.hd});
    gpu_->attention_rows(o.g, q.g, gv.data(), pos.data(), p);
    for (int64_t r = 0; r < n; ++r)
      cpu_->attention(o.c.slice_rows(r, r + 1), q.c.slice_rows(r, r + 1), cv[size_t(r)],
                      pos.data() + r, p);
    EXPECT_LT(rel_err(down(o.g), o.host), 1.5e-2) << "attention_rows " << what;
  }
}

TEST_F(CudaRows, PickTokensEqualPickTokenOnEachRow) {
  for (int64_t vocab : {17, 151936}) {
    const int64_t m = 7;
    auto l = make({m, vocab}, randn(size_t(m * vocab), uint32_t(vocab) + 3, 3.0f), DType::F32);
    std::vector<TokenPick> picks(size_t(m));
    for (int64_t r = 0; r < m; ++r) {
      TokenPick& p = picks[size_t(r)];
      if (r % 2) {  // sampled rows between greedy ones
        p.temperature = 0.7f + 0.1f * float(r);
        p.top_k = r == 3 ? 40 : 0;
        p.top_p = r == 5 ? 0.9f : 1.0f;
        p.u = double(r) / double(m);
      }
    }
    std::vector<int32_t> got(size_t(m), -1);
    gpu_->pick_tokens(got.data(), l.g, picks.data());
    for (int64_t r = 0; r < m; ++r) {
      int32_t want = -1;
      gpu_->pick_token(&want, l.g.slice_rows(r, r + 1).reshaped({vocab}), picks[size_t(r)]);
      EXPECT_EQ(got[size_t(r)], want) << "row " << r << " of vocab " << vocab;
    }
  }
}

}  // namespace
}  // namespace hearth::test

#endif  // HEARTH_HAVE_CUDA
