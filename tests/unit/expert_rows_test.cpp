// ExpertRows: the (token, slot) pairs of a MoE routing grouped by expert (the GPU's grouped
// path runs each expert once over its rows, gathered by src and combined back through pos).
#include "backend/expert_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace hearth {
namespace {

// Every pair lands in exactly one row of its expert, rows of an expert come in ascending token
// order, and the counts and active experts are those of the ids.
void expect_grouping(const std::vector<int32_t>& ids, int64_t n, int64_t k, int64_t E) {
  ExpertRows r;
  r.group(ids.data(), n, k, E);
  ASSERT_EQ(r.offset.size(), size_t(E + 1));
  ASSERT_EQ(r.src.size(), size_t(n * k));
  ASSERT_EQ(r.pos.size(), size_t(n * k));
  EXPECT_EQ(r.offset.front(), 0);
  EXPECT_EQ(r.offset.back(), n * k);
  std::vector<int64_t> count(size_t(E), 0);
  for (int32_t id : ids) ++count[size_t(id)];
  int64_t active = 0;
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(r.offset[size_t(e + 1)] - r.offset[size_t(e)], count[size_t(e)]) << "expert " << e;
    active += count[size_t(e)] > 0;
    for (int64_t q = r.offset[size_t(e)] + 1; q < r.offset[size_t(e + 1)]; ++q)
      EXPECT_LT(r.src[size_t(q - 1)], r.src[size_t(q)]) << "expert " << e << " row " << q;
  }
  EXPECT_EQ(r.active, active);
  std::vector<int> used(size_t(n * k), 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t q = r.pos[size_t(t * k + j)];
      ASSERT_GE(q, 0);
      ASSERT_LT(q, n * k);
      ++used[size_t(q)];
      EXPECT_EQ(r.src[size_t(q)], t);
      const int32_t e = ids[size_t(t * k + j)];
      EXPECT_GE(q, r.offset[size_t(e)]);
      EXPECT_LT(q, r.offset[size_t(e + 1)]);
    }
  }
  for (int u : used) EXPECT_EQ(u, 1);
}

TEST(ExpertRows, GroupsRandomRoutings) {
  std::mt19937 rng(7);
  for (auto [n, k, E] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {1, 8, 128}, {17, 2, 8}, {100, 8, 128}, {513, 10, 512}}) {
    std::vector<int32_t> ids(size_t(n * k));
    for (int64_t t = 0; t < n; ++t) {
      // k distinct experts per token, as a top-k gives.
      std::vector<int32_t> all(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) all[size_t(e)] = int32_t(e);
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t j = 0; j < k; ++j) ids[size_t(t * k + j)] = all[size_t(j)];
    }
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " E=" + std::to_string(E));
    expect_grouping(ids, n, k, E);
  }
}

TEST(ExpertRows, ReusedForSmallerRoutings) {
  ExpertRows r;
  const std::vector<int32_t> big = {3, 1, 0, 2, 3, 0, 1, 2};
  r.group(big.data(), 4, 2, 4);
  const std::vector<int32_t> small = {2, 0};
  r.group(small.data(), 1, 2, 4);
  EXPECT_EQ(r.offset, (std::vector<int64_t>{0, 1, 1, 2, 2}));
  EXPECT_EQ(r.src, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(r.pos, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(r.active, 2);
}

TEST(ExpertRows, OutOfRangeIdIsAnError) {
  ExpertRows r;
  for (int32_t bad : {-1, 4}) {
    const std::vector<int32_t> ids = {0, bad};
    try {
      r.group(ids.data(), 1, 2, 4);
      ADD_FAILURE() << "no error for expert " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert " + std::to_string(bad) + " of 4"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace hearth
