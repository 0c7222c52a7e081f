// Qwen35Sequence: KV for the full-attention layers (a KvCache over just those layers) and the
// conv / delta-rule states of the linear layers, with snapshots of the recurrent part.
// Invariant: every state describes exactly positions [0, n_past()); a snapshot is only valid for
// the token prefix it was taken at, so truncation drops snapshots beyond the new end.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/qwen3_5.h"

namespace hearth {

namespace {

// State buffers are f32; copies go through the backend so they work in device memory.
Tensor as_floats(const DeviceBuffer& b) {
  return b.view(DType::F32, {int64_t(b.size() / sizeof(float))});
}

DeviceBuffer copy_buffer(Backend& be, const DeviceBuffer& b) {
  DeviceBuffer c = be.alloc(b.size());
  be.copy(as_floats(c), as_floats(b));
  return c;
}

}  // namespace

size_t RecurrentSnapshot::bytes() const {
  size_t total = 0;
  for (const auto& b : conv) total += b.size();
  for (const auto& b : recurrent) total += b.size();
  return total;
}

Qwen35Sequence::Qwen35Sequence(Backend& backend, const Qwen35Descriptor& d)
    : backend_(&backend),
      kv_(backend, std::vector<int>(size_t(d.n_full_layers()), 0), int(d.n_head_kv),
          int(d.head_dim)) {
  int n_kv = 0, n_lin = 0;
  for (int64_t i = 0; i < d.n_layer; ++i) {
    const bool lin = d.linear_layer[size_t(i)];
    kv_index_.push_back(lin ? -1 : n_kv++);
    lin_index_.push_back(lin ? n_lin++ : -1);
  }
  const int64_t K = d.conv_kernel, C = d.conv_dim();
  const int64_t Hv = d.lin_v_heads, Dk = d.lin_k_dim, Dv = d.lin_v_dim;
  for (int i = 0; i < n_lin; ++i) {
    conv_.push_back(backend.alloc(size_t(std::max<int64_t>(K - 1, 1) * C) * sizeof(float)));
    rec_.push_back(backend.alloc(size_t(Hv * Dk * Dv) * sizeof(float)));
    conv_views_.push_back(conv_.back().view(DType::F32, {K - 1, C}));
    rec_views_.push_back(rec_.back().view(DType::F32, {Hv, Dk, Dv}));
  }
  reset_recurrent();
}

Qwen35Sequence::Qwen35Sequence(const Qwen35Sequence& from, KvCache shared_kv)
    : backend_(from.backend_),
      kv_(std::move(shared_kv)),
      kv_index_(from.kv_index_),
      lin_index_(from.lin_index_),
      kept_(from.kept_) {
  for (size_t i = 0; i < from.conv_.size(); ++i) {
    conv_.push_back(copy_buffer(*backend_, from.conv_[i]));
    rec_.push_back(copy_buffer(*backend_, from.rec_[i]));
    conv_views_.push_back(from.conv_views_[i]);
    conv_views_.back().data = conv_.back().data();
    rec_views_.push_back(from.rec_views_[i]);
    rec_views_.back().data = rec_.back().data();
  }
}

std::unique_ptr<SequenceState> Qwen35Sequence::share() const {
  return std::unique_ptr<SequenceState>(new Qwen35Sequence(*this, kv_.share()));
}

void Qwen35Sequence::reset_recurrent() {
  for (auto& b : conv_) backend_->fill(as_floats(b), 0.0f);
  for (auto& b : rec_) backend_->fill(as_floats(b), 0.0f);
}

size_t Qwen35Sequence::bytes() const {
  size_t total = kv_.bytes();
  for (const auto& b : conv_) total += b.size();
  for (const auto& b : rec_) total += b.size();
  for (const auto& s : kept_) total += s->bytes() / size_t(s.use_count());
  return total;
}

std::unique_ptr<RecurrentSnapshot> Qwen35Sequence::snapshot() const {
  auto s = std::make_unique<RecurrentSnapshot>();
  s->n_past = n_past();
  for (const auto& b : conv_) s->conv.push_back(copy_buffer(*backend_, b));
  for (const auto& b : rec_) s->recurrent.push_back(copy_buffer(*backend_, b));
  return s;
}

bool Qwen35Sequence::restore(const RecurrentSnapshot& snap) {
  if (snap.n_past > n_past() || snap.conv.size() != conv_.size() ||
      snap.recurrent.size() != rec_.size())
    return false;
  for (size_t i = 0; i < conv_.size(); ++i) {
    if (snap.conv[i].size() != conv_[i].size() || snap.recurrent[i].size() != rec_[i].size())
      return false;
  }
  if (!kv_.truncate(snap.n_past)) return false;
  for (size_t i = 0; i < conv_.size(); ++i) {
    backend_->copy(as_floats(conv_[i]), as_floats(snap.conv[i]));
    backend_->copy(as_floats(rec_[i]), as_floats(snap.recurrent[i]));
  }
  std::erase_if(kept_, [&](const auto& s) { return s->n_past > snap.n_past; });
  return true;
}

void Qwen35Sequence::keep(std::shared_ptr<const RecurrentSnapshot> s, size_t max_kept) {
  const int64_t n = s->n_past;
  std::erase_if(kept_, [n](const auto& k) { return k->n_past == n; });
  const auto at = std::upper_bound(kept_.begin(), kept_.end(), n,
                                   [](int64_t v, const auto& k) { return v < k->n_past; });
  kept_.insert(at, std::move(s));
  while (kept_.size() > std::max<size_t>(max_kept, 1)) kept_.erase(kept_.begin());
}

void Qwen35Sequence::keep_snapshot(size_t max_kept) { keep(snapshot(), max_kept); }

void Qwen35Sequence::keep_checkpoints_within(std::span<const int64_t> positions) {
  planned_.clear();
  building_.clear();
  if (conv_.empty()) return;  // no recurrent layers: the KV alone goes back anywhere
  for (int64_t p : positions) {
    if (p <= n_past() || (!planned_.empty() && p <= planned_.back()))
      fail("checkpoint positions must increase past the sequence's {} positions (got {})", n_past(),
           p);
    planned_.push_back(p);
    auto s = std::make_unique<RecurrentSnapshot>();
    s->n_past = p;
    s->conv.resize(conv_.size());
    s->recurrent.resize(rec_.size());
    building_.push_back(std::move(s));
  }
}

void Qwen35Sequence::snapshot_layer(size_t k, int lin) {
  RecurrentSnapshot& s = *building_.at(k);
  s.conv.at(size_t(lin)) = copy_buffer(*backend_, conv_[size_t(lin)]);
  s.recurrent.at(size_t(lin)) = copy_buffer(*backend_, rec_[size_t(lin)]);
}

void Qwen35Sequence::keep_planned(size_t max_kept) {
  if (building_.empty()) return;  // every decode step: nothing planned
  for (auto& s : building_) {
    // Complete only when every linear layer passed its position (a forward that stopped early
    // leaves it unkept).
    const bool complete =
        s->n_past <= n_past() &&
        std::all_of(s->conv.begin(), s->conv.end(), [](const auto& b) { return bool(b.data()); });
    if (complete) keep(std::move(s), max_kept);
  }
  planned_.clear();
  building_.clear();
}

bool Qwen35Sequence::truncate(int64_t n) {
  if (n >= n_past()) return true;
  if (conv_.empty()) return kv_.truncate(n);  // no recurrent layers (qwen3_moe): the KV alone
  if (n <= 0) {
    kv_.truncate(0);
    reset_recurrent();
    kept_.clear();
    return true;
  }
  for (const auto& s : kept_)
    if (s->n_past == n) {
      // restore() copies from *s and then drops snapshots past n, never s itself.
      return restore(*s);
    }
  return false;
}

}  // namespace hearth
