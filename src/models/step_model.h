// StepModel: what the architectures' forward passes share. forward() and forward_pick() both
// call the architecture's run(), which brackets one backend step: start_step() opens the step
// and sets the positions; finish_with_logits() runs the output head and finish_step() gives the
// step's end to the backend — the logits to the host, or only the token picked from the last
// row (on a GPU the logits then never leave the device).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/token_pick.h"
#include "core/error.h"
#include "models/model.h"

namespace hearth {

class StepModel : public Model {
 public:
  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) final {
    run(state, tokens, rows, logits, nullptr, nullptr);
  }
  bool has_hidden_states() const final { return true; }
  int32_t forward_pick(SequenceState& state, std::span<const int32_t> tokens,
                       const TokenPick& pick) final {
    int32_t token = 0;
    run(state, tokens, LogitsRows::Last, nullptr, &pick, &token);
    return token;
  }

  // Picking ahead through a backend that does (else Model's: each step at once): the step ends
  // in pick_token_ahead, and a kPickedToken input is embedded where the previous pick lies
  // (embedding_of_pick).
  bool picks_ahead() const final { return step_backend().picks_ahead(); }
  size_t memory_available() const final { return step_backend().memory_available(); }
  Device device() const final { return step_backend().device(); }
  void queue_pick(SequenceState& state, int32_t token, const TokenPick& pick) final {
    if (!picks_ahead()) return Model::queue_pick(state, token, pick);
    picked_input_ = token == kPickedToken;
    const int32_t id = picked_input_ ? 0 : token;  // 0: a valid id for the checks, not read
    try {
      run(state, std::span<const int32_t>(&id, 1), LogitsRows::Last, nullptr, &pick, nullptr);
    } catch (...) {
      picked_input_ = false;
      throw;
    }
    picked_input_ = false;
  }
  int32_t take_pick() final {
    return picks_ahead() ? step_backend().take_picked_token() : Model::take_pick();
  }

 protected:
  virtual Backend& step_backend() const = 0;

  // The step's input rows: the embeddings of `tokens`, or in a queue_pick step whose input is
  // kPickedToken, of the token the previous step picked.
  void embed(Backend& be, const Tensor& x, const Tensor& table, std::span<const int32_t> tokens,
             float scale) const {
    if (picked_input_)
      be.embedding_of_pick(x, table, scale);
    else
      be.embedding(x, table, tokens.data(), scale);
  }

  // The forward pass: the requested rows' logits to `logits` (host), or with `pick` only the
  // token picked from the last row to *token (token null: picked ahead, for take_pick).
  virtual void run(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
                   float* logits, const TokenPick* pick, int32_t* token) = 0;

  static void check_tokens(std::span<const int32_t> tokens, int64_t n_vocab) {
    for (int32_t t : tokens)
      if (t < 0 || t >= n_vocab) fail("token id {} is out of range [0, {})", t, n_vocab);
  }

  // Opens the backend step (the CUDA backend records a decode step and replays it as a graph)
  // and sets positions_ to start, start + 1, ... for the step's n tokens.
  void start_step(Backend& be, int64_t n, int64_t start) {
    be.begin_step(n);
    positions_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) positions_[size_t(i)] = int32_t(start + i);
  }

  // The f32 logits buffer in the backend's memory for n_rows rows (grown as needed).
  Tensor logits_rows(Backend& be, int64_t n_rows, int64_t n_vocab) {
    if (n_rows > logits_capacity_) {
      logits_ = be.alloc(size_t(n_rows * n_vocab) * sizeof(float));
      logits_capacity_ = n_rows;
    }
    return logits_.view(DType::F32, {n_rows, n_vocab});
  }

  // The output head: the final norm (applied inside the product), the vocabulary projection,
  // then the logits scaled and soft-capped where the model says so.
  struct OutputHead {
    Tensor norm;
    float eps = 0.0f, norm_offset = 0.0f;
    Tensor weight;  // [n_vocab, hidden]
    int64_t n_vocab = 0;
    float logits_scale = 1.0f;  // 1: none
    float softcap = 0.0f;       // 0: none
  };

  // Ends the step after the layers: the head over the requested rows of x ([n, hidden]; h of the
  // same shape is the norm's scratch), in the backend's memory as f32, then finish_step.
  void finish_with_logits(Backend& be, const Tensor& x, const Tensor& h, LogitsRows rows,
                          const OutputHead& head, float* logits, const TokenPick* pick,
                          int32_t* token) {
    if (rows == LogitsRows::None) return be.end_step();
    if (rows == LogitsRows::Hidden) {  // the head's norm alone: the last hidden state
      be.rms_norm(h, x, head.norm, head.eps, head.norm_offset);
      be.to_host_f32(logits, h);
      return be.end_step();
    }
    const int64_t n = x.dim(0);
    const int64_t first = rows == LogitsRows::Last ? n - 1 : 0;
    const Tensor out = head_logits(be, x.slice_rows(first, n), h.slice_rows(first, n), head);
    finish_step(be, out, logits, pick, token);
  }

  // The head over every row of x ([m, hidden]; h the norm's scratch): [m, n_vocab] f32 in the
  // backend's memory.
  Tensor head_logits(Backend& be, const Tensor& x, const Tensor& h, const OutputHead& head) {
    const Tensor out = logits_rows(be, x.dim(0), head.n_vocab);
    const Backend::InputNorm norm{head.norm, head.eps, head.norm_offset, h};
    const Backend::LinearOut product{out, head.weight, Tensor()};
    be.linear_many(x, &product, 1, &norm);
    if (head.logits_scale != 1.0f) be.scale(out, head.logits_scale);
    if (head.softcap > 0.0f) be.softcap(out, head.softcap);
    return out;
  }

  // The rows [first, first + rows) of a batched step that belong to one sequence.
  template <class Seq>
  struct SequenceRowsOf {
    Seq* seq;
    int64_t first, rows;
  };
  // A forward_batch step's rows: every item's tokens concatenated into `tokens` (checked against
  // n_vocab), positions_ set to each item's next positions, and the rows each sequence owns.
  template <class Seq>
  std::vector<SequenceRowsOf<Seq>> batch_rows(std::span<const BatchItem> items, int64_t n_vocab,
                                              std::vector<int32_t>& tokens) {
    std::vector<SequenceRowsOf<Seq>> parts;
    tokens.clear();
    positions_.clear();
    for (const BatchItem& item : items) {
      check_tokens(item.tokens, n_vocab);
      auto* seq = static_cast<Seq*>(item.state);
      parts.push_back({seq, int64_t(tokens.size()), int64_t(item.tokens.size())});
      tokens.insert(tokens.end(), item.tokens.begin(), item.tokens.end());
      for (int64_t i = 0; i < int64_t(item.tokens.size()); ++i)
        positions_.push_back(int32_t(seq->n_past() + i));
    }
    return parts;
  }

  // A batched step's attention for one layer: per-head q/k norms, rope and the cache store
  // (qk_norm_rope_store), then attention, for every part on its own cache (kv_of(seq)), at
  // positions_. A run of one-row parts (decode tokens of different sequences) goes to the
  // backend's _rows ops in one call; longer parts (prompt chunks) go one by one.
  template <class Seq, class KvOf>
  void attend_parts(Backend& be, std::span<const SequenceRowsOf<Seq>> parts, const Tensor& q,
                    const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& q_norm,
                    const Tensor& k_norm, float eps, float norm_offset, const RopeParams* rope,
                    const AttentionParams& ap, KvOf kv_of) {
    for (size_t i = 0; i < parts.size();) {
      size_t j = i;
      while (j < parts.size() && parts[j].rows == 1) ++j;
      if (j - i < 2) j = i + 1;
      const int64_t first = parts[i].first, end = parts[j - 1].first + parts[j - 1].rows;
      const Tensor qs = q.slice_rows(first, end), ks = k.slice_rows(first, end),
                   vs = v.slice_rows(first, end), os = out.slice_rows(first, end);
      const int32_t* pos = positions_.data() + first;
      if (j - i == 1) {
        const KvView kv = kv_of(*parts[i].seq);
        be.qk_norm_rope_store(qs, ks, vs, q_norm, k_norm, eps, norm_offset, rope, kv, pos);
        be.attention(os, qs, kv, pos, ap);
      } else {
        row_kvs_.clear();
        for (size_t r = i; r < j; ++r) row_kvs_.push_back(kv_of(*parts[r].seq));
        be.qk_norm_rope_store_rows(qs, ks, vs, q_norm, k_norm, eps, norm_offset, rope,
                                   row_kvs_.data(), pos);
        be.attention_rows(os, qs, row_kvs_.data(), pos, ap);
      }
      i = j;
    }
  }

  // Ends a forward_batch step: the head over the last row of each item that asks for logits or
  // a pick (those rows of x gathered into `gather`, which holds x's rows; `norm` is the head's
  // norm scratch of the same size). Logits go to each item's pointer; picks are made by the
  // backend where the logits are, unless some item wants its logits too: then the host picks
  // (pick_token_host, the reference every backend's picker follows).
  void finish_with_item_logits(Backend& be, const Tensor& x, const DeviceBuffer& gather,
                               const DeviceBuffer& norm, DType act,
                               std::span<const BatchItem> items, const OutputHead& head) {
    std::vector<int32_t> rows;
    bool any_logits = false;
    int64_t end = 0;
    for (const BatchItem& item : items) {
      end += int64_t(item.tokens.size());
      if (item.logits || item.pick) rows.push_back(int32_t(end - 1));
      any_logits = any_logits || item.logits;
    }
    if (rows.empty()) return be.end_step();
    const int64_t m = int64_t(rows.size()), H = x.dim(1), V = head.n_vocab;
    const Tensor picked = gather.view(act, {m, H});
    be.gather_rows(picked, x, rows.data());
    const Tensor out = head_logits(be, picked, norm.view(act, {m, H}), head);
    if (!any_logits) {
      std::vector<TokenPick> picks;
      for (const BatchItem& item : items)
        if (item.pick) picks.push_back(*item.pick);
      item_tokens_.resize(size_t(m));
      be.pick_tokens(item_tokens_.data(), out, picks.data());
      be.end_step();
      size_t r = 0;
      for (const BatchItem& item : items)
        if (item.pick) *item.token = item_tokens_[r++];
      return;
    }
    item_logits_.resize(size_t(m * V));
    be.to_host_f32(item_logits_.data(), out);
    be.end_step();
    size_t r = 0;
    for (const BatchItem& item : items) {
      if (!item.logits && !item.pick) continue;
      const float* row = item_logits_.data() + r++ * size_t(V);
      if (item.logits)
        std::copy_n(row, V, item.logits);
      else
        *item.token =
            pick_token_host(std::span<const float>(row, size_t(V)), *item.pick, pick_scratch_);
    }
  }

  // Ends the step: `out` ([n_rows, n_vocab] f32) to the host, or its last row's picked token.
  static void finish_step(Backend& be, const Tensor& out, float* logits, const TokenPick* pick,
                          int32_t* token) {
    if (pick) {
      const int64_t n_rows = out.dim(0);
      const Tensor row = out.slice_rows(n_rows - 1, n_rows).reshaped({out.dim(1)});
      if (token)
        be.pick_token(token, row, *pick);
      else
        be.pick_token_ahead(row, *pick);
    } else {
      be.to_host_f32(logits, out);
    }
    be.end_step();
  }

  std::vector<int32_t> positions_;

 private:
  bool picked_input_ = false;         // queue_pick(kPickedToken) is running
  std::vector<float> item_logits_;    // finish_with_item_logits' rows on the host
  std::vector<int32_t> item_tokens_;  // ... or its picks
  std::vector<KvView> row_kvs_;       // attend_parts' caches of a run of one-row parts
  std::vector<std::pair<float, int32_t>> pick_scratch_;
  DeviceBuffer logits_;
  int64_t logits_capacity_ = 0;
};

}  // namespace hearth
