// The Qwen3.5 / Qwen3-Next hybrid family: Gated DeltaNet linear-attention layers (a recurrent
// state instead of a KV cache) interleaved with gated full-attention layers, dense or MoE MLPs.
// One architecture for qwen3_5 (multimodal wrapper, text weights only), qwen3_5_text, qwen3_next,
// qwen3_5_moe, and qwen3_moe as its all-attention variant (plain gains, no output gate, full
// rotary). Checkpoint quirks (name prefixes, MLX's shifted gains and conv layout, Qwen3-Next's
// fused per-key-head projections, the interleaved query/gate rows, expert layouts) are resolved
// once at load; the forward pass only follows the descriptor.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "kv/kv_cache.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/config_checks.h"
#include "models/model.h"
#include "models/moe.h"
#include "models/rope.h"
#include "models/tensor_parallel.h"
#include "parallel/communicator.h"

namespace hearth {

// The sizes (n_embd, n_layer, heads, head_dim, n_vocab, n_ctx_train) are AttentionDims'.
struct Qwen35Descriptor : AttentionDims {
  std::string model_type;  // the text model_type (qwen3_5_text, qwen3_next, ...)
  int64_t n_ff = 0;
  float norm_eps = 1e-6f;
  bool zero_centred_norms = true;  // (1 + w) gains on input/post/final/q/k norms
  bool attn_output_gate = true;    // q_proj holds [query | gate] per head; o_proj(attn·σ(gate))
  bool attention_bias = false;
  bool tied_embeddings = false;
  Activation act = Activation::Silu;
  std::vector<bool> linear_layer;  // per layer: Gated DeltaNet (else full attention)
  std::vector<bool> moe_layer;     // per layer: MoE MLP (else dense)
  // Gated DeltaNet
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 4;
  bool fused_qkvz = false;  // qwen3_next: in_proj_qkvz / in_proj_ba grouped per key head
  MoeShape moe;
  RopeSpec rope;

  int64_t conv_dim() const { return 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim; }
  int64_t n_full_layers() const;
};

Qwen35Descriptor qwen3_5_descriptor_from_config(const ModelConfig& config);
// options.gdn_recurrent_prefill picks the Gated DeltaNet prefill form.
std::unique_ptr<Model> make_qwen3_5_model(const ModelConfig& config, WeightStore weights,
                                          std::unique_ptr<Backend> backend,
                                          const LoadOptions& options = {});
// model_types (text and wrapper) served by this architecture, in the order of its table.
const std::vector<std::string>& qwen3_5_model_types();

// The part of the model one rank of a tensor-parallel Qwen3.5 model holds (the whole model when
// world is 1; docs/design-notes.md, "Tensor parallelism"). Heads and channels are split in rank
// order; KV heads and Gated DeltaNet key heads fewer than the ranks are replicated (a rank holds
// one, shared by world / count ranks); experts are partitioned whole (expert parallelism).
struct Qwen35Shard {
  int rank = 0, world = 1;
  ShardRange q_heads, kv_heads;  // full attention
  ShardRange k_heads, v_heads;   // Gated DeltaNet key and value heads
  ShardRange ff, shared_ff;      // dense MLP and shared-expert channels
  ShardRange experts;            // routed experts this rank computes
  ShardRange vocab;              // embedding and head rows
};
Qwen35Shard qwen3_5_shard(const Qwen35Descriptor& d, int rank, int world);
// The shapes a rank computes with: its head, channel and shared-expert counts. n_vocab (token
// ids) and moe.n_expert (the router's width) stay whole.
Qwen35Descriptor qwen3_5_rank_descriptor(const Qwen35Descriptor& d, const Qwen35Shard& s);
// Throws, naming the numbers, unless the model splits over `world` ranks (before any weight is
// read): attention heads and intermediate sizes divisible by it, KV heads and linear key heads
// divisible by it or it by them, linear value heads divisible by it.
void check_qwen3_5_tensor_parallel(const Qwen35Descriptor& d, int world);
// One rank of a tensor-parallel Qwen3.5-family model: its shard of every weight, read from
// `weights` (the whole checkpoint).
std::unique_ptr<Model> make_qwen3_5_rank_model(const ModelConfig& config, WeightStore weights,
                                               std::unique_ptr<Backend> backend,
                                               const LoadOptions& options,
                                               const TensorShard& shard);

// The whole recurrent part of a sequence at a token boundary: conv and delta-rule states of every
// linear layer. Attention KV is not copied: it can always be cut back to n_past.
struct RecurrentSnapshot {
  int64_t n_past = 0;
  std::vector<DeviceBuffer> conv, recurrent;  // in the backend's memory
  size_t bytes() const;
};

// Per-sequence state: KV for the full-attention layers, (conv state [K-1, conv_dim], recurrent
// state [Hv, Dk, Dv], both f32) for each linear layer.
// The recurrent state cannot be cut back, so truncate(n) succeeds only for n >= n_past(), n == 0,
// or n equal to a snapshot kept with keep_snapshot(); later snapshots are dropped on truncation.
// A stack without recurrent layers (qwen3_moe) truncates like a KV cache, to any n.
class Qwen35Sequence final : public SequenceState {
 public:
  Qwen35Sequence(Backend& backend, const Qwen35Descriptor& d);
  int64_t n_past() const override { return kv_.n_past(); }
  bool truncate(int64_t n) override;
  size_t bytes() const override;
  // The KV's growth; the recurrent state has a fixed size (snapshots kept later not counted).
  size_t bytes_after(int64_t n_more) const override {
    return bytes() - kv_.bytes() + kv_.bytes_after(n_more);
  }

  // Shares the KV blocks and the kept snapshots (never written after they are taken) and
  // copies the current recurrent state. Null where the KV cannot be shared (CUDA rings).
  std::unique_ptr<SequenceState> share() const override;

  std::unique_ptr<RecurrentSnapshot> snapshot() const;
  // Returns to the snapshot's position; false (and no change) when the sequence is already
  // shorter than the snapshot (its KV no longer holds those positions).
  bool restore(const RecurrentSnapshot& snap);
  // Keeps a snapshot at n_past() inside the sequence for truncate(); at most `max_kept` are kept
  // (oldest dropped).
  void keep_snapshot(size_t max_kept = 8);
  void keep_checkpoint() override { keep_snapshot(); }
  bool needs_checkpoints() const override { return !conv_.empty(); }
  size_t kept_snapshots() const { return kept_.size(); }

  // Checkpoints inside the next forward (SequenceState::keep_checkpoints_within): the model runs
  // a prompt chunk's linear layers in segments ending at each planned position, snapshots each
  // layer's states there (snapshot_layer), and keep_planned() keeps the snapshots once every
  // layer has run.
  void keep_checkpoints_within(std::span<const int64_t> positions) override;
  const std::vector<int64_t>& planned_checkpoints() const { return planned_; }
  // Linear layer `lin`'s conv and recurrent states, now at planned position k, into its snapshot.
  void snapshot_layer(size_t k, int lin);
  void keep_planned(size_t max_kept = 8);

  KvCache& kv() { return kv_; }
  int kv_index(int layer) const { return kv_index_[size_t(layer)]; }
  int lin_index(int layer) const { return lin_index_[size_t(layer)]; }
  const Tensor& conv_state(int lin) const { return conv_views_[size_t(lin)]; }
  const Tensor& recurrent_state(int lin) const { return rec_views_[size_t(lin)]; }

 private:
  Qwen35Sequence(const Qwen35Sequence& from, KvCache shared_kv);
  void reset_recurrent();

  Backend* backend_;
  KvCache kv_;
  std::vector<int> kv_index_, lin_index_;  // per layer, -1 when not of that kind
  std::vector<DeviceBuffer> conv_, rec_;
  std::vector<Tensor> conv_views_, rec_views_;
  // s into kept_ in position order (replacing one at the same position), the oldest dropped
  // past max_kept.
  void keep(std::shared_ptr<const RecurrentSnapshot> s, size_t max_kept);

  std::vector<std::shared_ptr<const RecurrentSnapshot>> kept_;  // shared with share()'s copies
  std::vector<int64_t> planned_;                                // keep_checkpoints_within
  std::vector<std::unique_ptr<RecurrentSnapshot>> building_;    // their snapshots, by layer
};

}  // namespace hearth
