// TensorParallelModel: the rank models of tensor_parallel.h behind one Model. Each call runs
// every rank's forward on its own thread (RankThreads); the vocabulary-parallel logits are
// all-gathered into whole rows, which rank 0 writes where the caller asked. Picks are made on
// the host from those rows (Model's defaults), as the CPU backend does anyway.
#include "models/tensor_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/token_pick.h"
#include "core/error.h"
#include "parallel/cpu_communicator.h"
#include "parallel/rank_threads.h"

namespace hearth {

namespace {

// One state per rank (each rank's KV cache holds that rank's KV heads); everything delegates.
class TensorParallelSequence final : public SequenceState {
 public:
  explicit TensorParallelSequence(std::vector<std::unique_ptr<SequenceState>> ranks)
      : ranks_(std::move(ranks)) {}
  int64_t n_past() const override { return ranks_[0]->n_past(); }
  bool truncate(int64_t n) override {
    bool all = true;
    for (auto& s : ranks_) all = s->truncate(n) && all;
    return all;
  }
  void keep_checkpoint() override {
    for (auto& s : ranks_) s->keep_checkpoint();
  }
  void keep_checkpoints_within(std::span<const int64_t> positions) override {
    for (auto& s : ranks_) s->keep_checkpoints_within(positions);
  }
  bool needs_checkpoints() const override { return ranks_[0]->needs_checkpoints(); }
  size_t bytes() const override {
    size_t total = 0;
    for (const auto& s : ranks_) total += s->bytes();
    return total;
  }
  size_t bytes_after(int64_t n_more) const override {
    size_t total = 0;
    for (const auto& s : ranks_) total += s->bytes_after(n_more);
    return total;
  }
  std::unique_ptr<SequenceState> share() const override {
    std::vector<std::unique_ptr<SequenceState>> shared;
    for (const auto& s : ranks_) {
      shared.push_back(s->share());
      if (!shared.back()) return nullptr;
    }
    return std::make_unique<TensorParallelSequence>(std::move(shared));
  }
  SequenceState& rank(int r) { return *ranks_[size_t(r)]; }
  // A step that failed part way (a rank out of memory) may have advanced some ranks' states and
  // not others: such a state must not run again, it would mix positions.
  void check_in_step() const {
    for (const auto& s : ranks_)
      if (s->n_past() != ranks_[0]->n_past())
        fail(
            "tensor parallel: this sequence's ranks hold {} and {} positions after a step that "
            "failed part way; start it again",
            ranks_[0]->n_past(), s->n_past());
  }

 private:
  std::vector<std::unique_ptr<SequenceState>> ranks_;
};

class TensorParallelModel final : public Model {
 public:
  TensorParallelModel(int world, const RankModelFactory& make_rank)
      : group_(world), threads_(group_), ranks_(size_t(world)), scratch_(size_t(world)) {
    threads_.run([&](int r) { ranks_[size_t(r)] = make_rank(r, group_.rank(r)); });
    info_ = ranks_[0]->info();
    info_.kv_bytes_per_token = 0;
    info_.head_params = 0;
    for (const auto& m : ranks_) {
      info_.kv_bytes_per_token += m->info().kv_bytes_per_token;
      info_.head_params += m->info().head_params;
    }
    info_.architecture += fmt::format(", tensor parallel {} (CPU, one thread per rank)", world);
    for (int r = 0; r < world; ++r) widths_.push_back(shard_range(info_.n_vocab, r, world).size());
  }

  const ModelInfo& info() const override { return info_; }
  const WeightStore* weight_store() const override { return ranks_[0]->weight_store(); }
  bool has_hidden_states() const override { return ranks_[0]->has_hidden_states(); }
  size_t memory_available() const override { return ranks_[0]->memory_available(); }

  std::unique_ptr<SequenceState> new_sequence() const override {
    std::vector<std::unique_ptr<SequenceState>> states;
    for (const auto& m : ranks_) states.push_back(m->new_sequence());
    return std::make_unique<TensorParallelSequence>(std::move(states));
  }

  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) override {
    auto& seq = static_cast<TensorParallelSequence&>(state);
    check_tokens(tokens);
    seq.check_in_step();
    const int64_t n = int64_t(tokens.size());
    if (n == 0) return;
    const int64_t n_rows = rows == LogitsRows::Last ? 1 : n;
    threads_.run([&](int r) {
      Model& m = *ranks_[size_t(r)];
      std::vector<float>& mine = scratch_[size_t(r)].mine;
      if (rows == LogitsRows::None) return m.forward(seq.rank(r), tokens, rows, nullptr);
      if (rows == LogitsRows::Hidden) {  // replicated: rank 0 writes the caller's rows
        if (r != 0) mine.resize(size_t(n * info_.n_embd));
        return m.forward(seq.rank(r), tokens, rows, r == 0 ? logits : mine.data());
      }
      mine.resize(size_t(n_rows * widths_[size_t(r)]));
      m.forward(seq.rank(r), tokens, rows, mine.data());
      gather(r, n_rows, r == 0 ? logits : nullptr);
    });
  }

  // Each rank steps its own states together; the rows that want logits or a pick are gathered
  // whole, then handed out (picks made here, on the host).
  void forward_batch(std::span<const BatchItem> items) override {
    check_batch(items);
    for (const BatchItem& item : items) {
      check_tokens(item.tokens);
      static_cast<const TensorParallelSequence*>(item.state)->check_in_step();
    }
    int64_t m = 0;
    for (const BatchItem& item : items) m += item.logits || item.pick ? 1 : 0;
    batch_rows_.resize(size_t(m * info_.n_vocab));
    threads_.run([&](int r) {
      std::vector<float>& mine = scratch_[size_t(r)].mine;
      const int64_t w = widths_[size_t(r)];
      mine.resize(size_t(m * w));
      std::vector<BatchItem> own;
      int64_t row = 0;
      for (const BatchItem& item : items) {
        BatchItem b;
        b.state = &static_cast<TensorParallelSequence*>(item.state)->rank(r);
        b.tokens = item.tokens;
        if (item.logits || item.pick) b.logits = mine.data() + row++ * w;
        own.push_back(b);
      }
      ranks_[size_t(r)]->forward_batch(own);
      if (m > 0) gather(r, m, r == 0 ? batch_rows_.data() : nullptr);
    });
    const size_t V = size_t(info_.n_vocab);
    size_t row = 0;
    for (const BatchItem& item : items) {
      if (!item.logits && !item.pick) continue;
      const float* got = batch_rows_.data() + row++ * V;
      if (item.logits)
        std::copy_n(got, V, item.logits);
      else
        *item.token = pick_token_host(std::span<const float>(got, V), *item.pick, pick_scratch_);
    }
  }

 private:
  struct RankScratch {
    std::vector<float> mine;      // this rank's logits (its vocabulary columns)
    std::vector<float> gathered;  // the whole rows, where the caller does not take them
  };

  void check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= info_.n_vocab)
        fail("token id {} is out of range [0, {})", t, info_.n_vocab);
  }

  // Rank r's part of n_rows rows (scratch_[r].mine) gathered into whole rows: into `out` when
  // given, else into the rank's own scratch.
  void gather(int r, int64_t n_rows, float* out) {
    RankScratch& s = scratch_[size_t(r)];
    if (!out) {
      s.gathered.resize(size_t(n_rows * info_.n_vocab));
      out = s.gathered.data();
    }
    group_.rank(r).all_gather_columns(s.mine.data(), n_rows, widths_, out);
  }

  CpuCommGroup group_;
  RankThreads threads_;
  std::vector<std::unique_ptr<Model>> ranks_;
  std::vector<RankScratch> scratch_;
  std::vector<int64_t> widths_;  // each rank's vocabulary columns
  ModelInfo info_;
  std::vector<float> batch_rows_;  // forward_batch's gathered rows (rank 0's)
  std::vector<std::pair<float, int32_t>> pick_scratch_;
};

}  // namespace

std::unique_ptr<Model> make_tensor_parallel_model(int world, const RankModelFactory& make_rank) {
  if (world < 2) fail("a tensor-parallel model needs at least 2 ranks (got {})", world);
  return std::make_unique<TensorParallelModel>(world, make_rank);
}

}  // namespace hearth
