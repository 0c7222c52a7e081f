// How a Qwen3.5-family model splits over tensor-parallel ranks: the shape checks made before any
// weight is read, each rank's heads, channels, experts and vocabulary rows, and the shapes it
// computes with (docs/design-notes.md, "Tensor parallelism").
#include "core/error.h"
#include "models/qwen3_5.h"

namespace hearth {

namespace {

// `total` heads over `world` ranks: split when they divide, else (world a multiple of total) one
// head per rank, each replicated on world / total ranks (vLLM's rule for KV heads).
ShardRange heads_of_rank(int64_t total, int rank, int world) {
  if (total == 0 || total >= world) return shard_range(total, rank, world);
  const int64_t h = int64_t(rank) * total / world;
  return {h, h + 1};
}

bool has_layer(const std::vector<bool>& flags, bool value) {
  for (bool f : flags)
    if (f == value) return true;
  return false;
}

}  // namespace

void check_qwen3_5_tensor_parallel(const Qwen35Descriptor& d, int world) {
  if (world < 1) fail("the tensor-parallel size must be at least 1 (got {})", world);
  if (world == 1) return;
  auto must_divide = [&](int64_t n, const char* field, const char* why) {
    if (n % world != 0)
      fail("--tensor-parallel {}: {} ({}) must be divisible by the tensor-parallel size ({})",
           world, field, n, why);
  };
  if (has_layer(d.linear_layer, false)) {
    must_divide(d.n_head, "num_attention_heads", "each rank holds whole heads, as in vLLM");
    if (d.n_head_kv % world != 0 && world % d.n_head_kv != 0)
      fail(
          "--tensor-parallel {}: num_key_value_heads ({}) must be divisible by the "
          "tensor-parallel size, or the size by it (KV heads are then replicated, as in vLLM)",
          world, d.n_head_kv);
  }
  if (has_layer(d.linear_layer, true)) {
    must_divide(d.lin_v_heads, "linear_num_value_heads",
                "each rank holds whole Gated DeltaNet heads");
    // A rank's value heads must share its key heads: whole key heads per rank, or one key head
    // replicated on world / linear_num_key_heads ranks that split its value heads.
    if (d.lin_k_heads % world != 0 && world % d.lin_k_heads != 0)
      fail(
          "--tensor-parallel {}: linear_num_key_heads ({}) must be divisible by the "
          "tensor-parallel size, or the size by it (each rank's value heads must share its key "
          "heads)",
          world, d.lin_k_heads);
  }
  bool dense = false;
  for (size_t i = 0; i < d.moe_layer.size(); ++i) dense = dense || !d.moe_layer[i];
  if (dense) must_divide(d.n_ff, "intermediate_size", "as in vLLM");
  if (has_layer(d.moe_layer, true) && d.moe.n_ff_shared > 0)
    must_divide(d.moe.n_ff_shared, "shared_expert_intermediate_size",
                "the shared expert splits like a dense MLP");
}

Qwen35Shard qwen3_5_shard(const Qwen35Descriptor& d, int rank, int world) {
  Qwen35Shard s;
  s.rank = rank;
  s.world = world;
  s.q_heads = shard_range(d.n_head, rank, world);
  s.kv_heads = heads_of_rank(d.n_head_kv, rank, world);
  s.k_heads = heads_of_rank(d.lin_k_heads, rank, world);
  s.v_heads = shard_range(d.lin_v_heads, rank, world);
  s.ff = shard_range(d.n_ff, rank, world);
  s.shared_ff = shard_range(d.moe.n_ff_shared, rank, world);
  s.experts = shard_range(d.moe.n_expert, rank, world);
  s.vocab = shard_range(d.n_vocab, rank, world);
  return s;
}

Qwen35Descriptor qwen3_5_rank_descriptor(const Qwen35Descriptor& d, const Qwen35Shard& s) {
  Qwen35Descriptor r = d;
  r.n_head = s.q_heads.size();
  r.n_head_kv = s.kv_heads.size();
  r.lin_k_heads = s.k_heads.size();
  r.lin_v_heads = s.v_heads.size();
  r.n_ff = s.ff.size();
  r.moe.n_ff_shared = s.shared_ff.size();
  return r;
}

}  // namespace hearth
