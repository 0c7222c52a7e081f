// The CPU communicator and the rank threads: all-reduce sums bit-identical to a serial sum in
// rank order at awkward sizes and world sizes, round after round; column gathers of uneven
// widths; size mismatches and a failing rank end in errors on every rank, never a hang, and
// leave the group usable.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "parallel/cpu_communicator.h"
#include "parallel/rank_threads.h"

namespace hearth {
namespace {

// Values of mixed sign and magnitude, so that a different summation order changes the bits.
std::vector<float> values(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

TEST(CpuCommunicator, AllReduceSumsInRankOrderRoundAfterRound) {
  for (int world : {1, 2, 3, 4}) {
    CpuCommGroup group(world);
    RankThreads threads(group);
    for (size_t n : {size_t(1), size_t(17), size_t(4097)}) {
      for (uint32_t round = 0; round < 3; ++round) {
        std::vector<std::vector<float>> in(static_cast<size_t>(world)), out(in.size());
        for (int r = 0; r < world; ++r)
          out[size_t(r)] = in[size_t(r)] = values(1000 * round + 10 * uint32_t(r) + uint32_t(n), n);
        threads.run([&](int r) {
          Communicator& comm = group.rank(r);
          EXPECT_EQ(comm.rank(), r);
          EXPECT_EQ(comm.world(), world);
          comm.all_reduce_sum(out[size_t(r)].data(), n);
        });
        for (size_t i = 0; i < n; ++i) {
          float want = in[0][i];
          for (int r = 1; r < world; ++r) want += in[size_t(r)][i];
          for (int r = 0; r < world; ++r)
            ASSERT_EQ(out[size_t(r)][i], want) << "world " << world << " n " << n << " round "
                                               << round << " rank " << r << " element " << i;
        }
      }
    }
  }
}

// Many collectives back to back inside one run: a rank racing ahead into the next round must
// not see (or clobber) the previous round's data.
TEST(CpuCommunicator, BackToBackCollectivesKeepRoundsApart) {
  constexpr int kWorld = 3, kRounds = 200;
  CpuCommGroup group(kWorld);
  RankThreads threads(group);
  std::vector<int> bad(kWorld, 0);
  threads.run([&](int r) {
    Communicator& comm = group.rank(r);
    const int64_t widths[kWorld] = {1, 0, 2};
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> v(5, float(round * 10 + r));
      comm.all_reduce_sum(v.data(), v.size());
      const float want = float(round * 10) * kWorld + float(0 + 1 + 2);
      for (float x : v) bad[size_t(r)] += x != want;
      std::vector<float> mine(size_t(2 * widths[r]), float(round * 100 + r));
      std::vector<float> all(2 * 3, -1.0f);
      comm.all_gather_columns(mine.data(), 2, widths, all.data());
      for (int row = 0; row < 2; ++row) {
        bad[size_t(r)] += all[size_t(row * 3)] != float(round * 100 + 0);
        bad[size_t(r)] += all[size_t(row * 3 + 1)] != float(round * 100 + 2);
        bad[size_t(r)] += all[size_t(row * 3 + 2)] != float(round * 100 + 2);
      }
    }
    comm.barrier();
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(bad[size_t(r)], 0) << "rank " << r;
}

TEST(CpuCommunicator, AllGatherColumnsOfUnevenWidths) {
  for (int world : {1, 2, 3, 4}) {
    CpuCommGroup group(world);
    RankThreads threads(group);
    for (int64_t total : {int64_t(1), int64_t(17), int64_t(4097)}) {
      const int64_t rows = 3;
      std::vector<int64_t> widths;
      for (int r = 0; r < world; ++r) widths.push_back(shard_range(total, r, world).size());
      const std::vector<float> full = values(uint32_t(total), size_t(rows * total));
      std::vector<std::vector<float>> out(size_t(world), std::vector<float>(full.size(), NAN));
      threads.run([&](int r) {
        const ShardRange cols = shard_range(total, r, world);
        std::vector<float> mine;
        for (int64_t row = 0; row < rows; ++row)
          for (int64_t c = cols.begin; c < cols.end; ++c)
            mine.push_back(full[size_t(row * total + c)]);
        group.rank(r).all_gather_columns(mine.data(), rows, widths, out[size_t(r)].data());
      });
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(out[size_t(r)], full) << "world " << world << " total " << total << " rank " << r;
    }
  }
}

TEST(CpuCommunicator, MismatchedSizesFailOnEveryRank) {
  CpuCommGroup group(3);
  RankThreads threads(group);
  std::atomic<int> failures = 0;
  EXPECT_THROW(threads.run([&](int r) {
    std::vector<float> v(4, 1.0f);
    try {
      group.rank(r).all_reduce_sum(v.data(), r == 2 ? 3 : 4);
    } catch (const Error&) {
      ++failures;
      throw;
    }
  }),
               Error);
  EXPECT_EQ(failures, 3);
  // Still usable.
  std::vector<std::vector<float>> v(3, std::vector<float>(2, 1.0f));
  threads.run([&](int r) { group.rank(r).all_reduce_sum(v[size_t(r)].data(), 2); });
  EXPECT_EQ(v[1], (std::vector<float>{3.0f, 3.0f}));
}

// A rank that fails before its collective: the others, already waiting in it, are released with
// CollectiveAborted; run() rethrows the failing rank's own error; the next run works.
TEST(CpuCommunicator, FailingRankDoesNotDeadlockTheOthers) {
  for (int failing : {0, 1, 3}) {
    CpuCommGroup group(4);
    RankThreads threads(group);
    std::atomic<int> aborted = 0;
    try {
      threads.run([&](int r) {
        if (r == failing) throw Error("rank failed on purpose");
        std::vector<float> v(17, 1.0f);
        try {
          Communicator& comm = group.rank(r);
          comm.all_reduce_sum(v.data(), v.size());
          comm.barrier();
        } catch (const CollectiveAborted&) {
          ++aborted;
          throw;
        }
      });
      ADD_FAILURE() << "run() did not throw";
    } catch (const CollectiveAborted& e) {
      ADD_FAILURE() << "run() rethrew an echo: " << e.what();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "rank failed on purpose");
    }
    EXPECT_EQ(aborted, 3) << "failing rank " << failing;
    EXPECT_FALSE(group.aborted());
    std::vector<std::vector<float>> v(4, std::vector<float>(1, 2.0f));
    threads.run([&](int r) { group.rank(r).all_reduce_sum(v[size_t(r)].data(), 1); });
    EXPECT_EQ(v[3][0], 8.0f);
  }
}

TEST(CpuCommunicator, RejectsAnEmptyGroup) { EXPECT_THROW(CpuCommGroup(0), Error); }

}  // namespace
}  // namespace hearth
