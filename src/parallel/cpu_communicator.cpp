#include "parallel/cpu_communicator.h"

#include <algorithm>
#include <cstring>

namespace hearth {

class CpuCommGroup::Rank final : public Communicator {
 public:
  Rank(CpuCommGroup& group, int r) : group_(group), rank_(r) {}
  int rank() const override { return rank_; }
  int world() const override { return group_.world_; }
  void all_reduce_sum(float* data, size_t count) override {
    group_.all_reduce_sum(rank_, data, count);
  }
  void all_gather_columns(const float* mine, int64_t rows, std::span<const int64_t> widths,
                          float* out) override {
    group_.all_gather_columns(rank_, mine, rows, widths, out);
  }
  void barrier() override { group_.arrive_and_wait(); }

 private:
  CpuCommGroup& group_;
  const int rank_;
};

CpuCommGroup::CpuCommGroup(int world) : world_(world), slots_(size_t(std::max(world, 1))) {
  if (world < 1) fail("a communicator group needs at least one rank (got {})", world);
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

CpuCommGroup::~CpuCommGroup() = default;

Communicator& CpuCommGroup::rank(int r) {
  if (r < 0 || r >= world_) fail("rank {} is outside the group of {}", r, world_);
  return *ranks_[size_t(r)];
}

void CpuCommGroup::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

bool CpuCommGroup::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

void CpuCommGroup::reset() {
  std::lock_guard lock(mutex_);
  aborted_ = false;
  arrived_ = 0;
  mismatch_.clear();
}

template <class Last>
void CpuCommGroup::arrive_and_wait(Last&& last) {
  std::unique_lock lock(mutex_);
  auto abandoned = [] {
    throw CollectiveAborted(
        "tensor parallel: another rank failed, so this collective was abandoned");
  };
  if (aborted_) abandoned();
  const uint64_t generation = generation_;
  if (++arrived_ == world_) {
    last();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) abandoned();
}

void CpuCommGroup::arrive_and_wait() {
  arrive_and_wait([] {});
}

void CpuCommGroup::all_reduce_sum(int r, float* data, size_t count) {
  slots_[size_t(r)] = Slot{.src = data, .count = count};
  arrive_and_wait([&] {
    mismatch_.clear();
    for (int k = 1; k < world_; ++k)
      if (slots_[size_t(k)].count != slots_[0].count)
        mismatch_ = fmt::format("all_reduce_sum: rank 0 sums {} elements but rank {} sums {}",
                                slots_[0].count, k, slots_[size_t(k)].count);
    if (mismatch_.empty() && sum_.size() < count) sum_.resize(count);
  });
  if (!mismatch_.empty()) throw Error(mismatch_);
  // This rank's part of the elements, summed over every rank's buffer in rank order. No buffer
  // is written until the second barrier, so every rank reads the inputs.
  const ShardRange part = shard_range(int64_t(count), r, world_);
  float* sum = sum_.data();
  for (int64_t i = part.begin; i < part.end; ++i) sum[i] = slots_[0].src[i];
  for (int k = 1; k < world_; ++k) {
    const float* src = slots_[size_t(k)].src;
    for (int64_t i = part.begin; i < part.end; ++i) sum[i] += src[i];
  }
  arrive_and_wait();
  // sum_ stays as it is until every rank has arrived at the next collective's first barrier,
  // which a rank reaches only after this copy.
  if (count) std::memcpy(data, sum, count * sizeof(float));
}

void CpuCommGroup::all_gather_columns(int r, const float* mine, int64_t rows,
                                      std::span<const int64_t> widths, float* out) {
  slots_[size_t(r)] = Slot{.src = mine, .rows = rows, .widths = widths};
  arrive_and_wait([&] {
    mismatch_.clear();
    for (int k = 0; k < world_ && mismatch_.empty(); ++k) {
      const Slot& s = slots_[size_t(k)];
      if (s.widths.size() != size_t(world_))
        mismatch_ = fmt::format("all_gather_columns: rank {} gives {} widths for {} ranks", k,
                                s.widths.size(), world_);
      else if (s.rows != slots_[0].rows || s.rows < 0)
        mismatch_ = fmt::format("all_gather_columns: rank 0 gathers {} rows but rank {} {}",
                                slots_[0].rows, k, s.rows);
      else if (!std::equal(s.widths.begin(), s.widths.end(), slots_[0].widths.begin()))
        mismatch_ = fmt::format("all_gather_columns: ranks 0 and {} disagree on the widths", k);
      for (size_t j = 0; j < s.widths.size() && mismatch_.empty(); ++j)
        if (s.widths[j] < 0) mismatch_ = fmt::format("all_gather_columns: width {} is negative", j);
    }
  });
  if (!mismatch_.empty()) throw Error(mismatch_);
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  int64_t offset = 0;
  for (int k = 0; k < world_; ++k) {
    const int64_t w = widths[size_t(k)];
    const float* src = slots_[size_t(k)].src;
    for (int64_t row = 0; row < rows && w > 0; ++row)
      std::memcpy(out + row * total + offset, src + row * w, size_t(w) * sizeof(float));
    offset += w;
  }
  arrive_and_wait();  // the others may still be reading this rank's block
}

}  // namespace hearth
