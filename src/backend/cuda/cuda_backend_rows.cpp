// The CUDA backend's steps of several sequences: the rows of a step belong to different
// sequences, each with its own KV cache or recurrent states, so the attention input, attention
// and Gated DeltaNet mixer kernels take a table of them (in the dyn area) and serve every row in
// one launch; the step's picks are made on the device and only the token ids come to the host.
#include <algorithm>
#include <bit>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"

namespace hearth::cuda {

void CudaBackend::begin_batch_step(int64_t n_tokens, int64_t n_sequences) {
  // One token per sequence (a decode step): recorded, a graph per sequence count. Steps with
  // prompt chunks differ in their chunks' lengths every time and run as they come.
  const bool decode = n_tokens == n_sequences && n_tokens >= 1 && n_tokens <= kBatchGraphRows;
  open_step(graphs_enabled_ && decode, kBatchSlots + 4 * n_tokens);
  // The GEMV's cost grows with its rows (each weight is multiplied by every row's input from
  // L1), while cuBLASLt's tensor-core GEMM reads the matrix once at any row count: past
  // kBatchGemvRows rows of different sequences the GEMM is faster (bench_cuda_linear).
  ctx_.gemv_max_rows = gemv_rows(kBatchGemvRows);
}

const SeqKv* CudaBackend::upload_seq_kvs(const KvView* kvs, int64_t n, KvDev* kv) {
  if (n < 1) return nullptr;
  int64_t most = 0;
  for (int64_t r = 0; r < n; ++r) {
    const KvView& v = kvs[r];
    if (!v.paged() || v.block_size != kKvBlock || v.k_offset != kvs[0].k_offset ||
        v.v_offset != kvs[0].v_offset || v.row_bytes != kvs[0].row_bytes || v.row_bytes % 16 != 0 ||
        v.k_offset % 16 != 0 || v.v_offset % 16 != 0)
      return nullptr;
    most = std::max(most, (v.end + kKvBlock - 1) / kKvBlock);
  }
  // Every row's block table in a slot of `stride` entries (the longest table's, a power of two
  // of at least four, padded with nulls): the step's layout in the dyn area, and so its graph,
  // changes only when the longest cache doubles.
  const int64_t stride = int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(most, 4))));
  std::vector<void*>& blocks = block_table_;
  blocks.assign(size_t(n * stride), nullptr);
  for (int64_t r = 0; r < n; ++r) {
    const KvView& v = kvs[r];
    std::copy_n(v.blocks, (v.end + kKvBlock - 1) / kKvBlock, blocks.begin() + r * stride);
  }
  // Tag 9: the rows' block tables, the same for each layer of their group (uploaded once).
  void* const* dev_blocks =
      reinterpret_cast<void* const*>(upload_ints(blocks.data(), int64_t(blocks.size()) * 2, 9));
  std::vector<SeqKv>& table = seq_table_;
  table.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    table[size_t(r)] = SeqKv{dev_blocks + r * stride, int32_t(kvs[r].first), 0};
  kv->k_off = kvs[0].k_offset / 2;  // bf16 elements
  kv->v_off = kvs[0].v_offset / 2;
  kv->span = stride * kKvBlock;
  // Tag 7: the rows' SeqKv (qk_norm_rope_store_rows and attention_rows of every layer of the
  // group upload the same table, which then lands once).
  return reinterpret_cast<const SeqKv*>(upload_ints(table.data(), n * 4, 7));
}

void CudaBackend::qk_norm_rope_store_rows(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& q_norm, const Tensor& k_norm, float eps,
                                          float off, const RopeParams* rope, const KvView* kvs,
                                          const int32_t* positions) {
  bind();
  const int64_t n = q.dim(0);
  const int32_t rot = rope ? int32_t(rope->rotary_dim) : 0;
  KvDev kv;
  const SeqKv* table =
      qk_norm_rope_store_fused(q, k, q_norm, k_norm, rot) ? upload_seq_kvs(kvs, n, &kv) : nullptr;
  if (!table)
    return Backend::qk_norm_rope_store_rows(q, k, v, q_norm, k_norm, eps, off, rope, kvs,
                                            positions);
  const int32_t* d_pos = upload_ints(positions, n, 1);
  const float* d_freq =
      rot > 0 ? reinterpret_cast<const float*>(upload_ints(rope->inv_freq, rot / 2, 2)) : nullptr;
  submit<&cuda::qk_norm_rope_store_rows>(Ten(q), Ten(k), Ten(v), Ten(q_norm), Ten(k_norm), eps, off,
                                         kv, table, d_pos, d_freq, rot,
                                         rope ? rope->attention_factor : 1.0f);
}

void CudaBackend::attention_rows(const Tensor& out, const Tensor& q, const KvView* kvs,
                                 const int32_t* positions, const AttentionParams& p) {
  bind();
  const int64_t n = q.dim(0);
  if (options_.deterministic) {
    // Fixed-length splits need a counter per split group: at most this many rows a launch.
    const int64_t per_call = cuda::attention_rows_per_call(p);
    if (n > per_call) {
      for (int64_t r0 = 0; r0 < n; r0 += per_call) {
        const int64_t r1 = std::min(n, r0 + per_call);
        attention_rows(out.slice_rows(r0, r1), q.slice_rows(r0, r1), kvs + r0, positions + r0, p);
      }
      return;
    }
  }
  KvDev kv;
  const SeqKv* table = p.head_dim % 8 == 0 ? upload_seq_kvs(kvs, n, &kv) : nullptr;
  if (!table && options_.deterministic)  // the default would come back through attention()
    fail(
        "{}: --deterministic attention needs caches of 64-position blocks and head dims of a "
        "multiple of 8 (head dim {})",
        name_, p.head_dim);
  if (!table) return Backend::attention_rows(out, q, kvs, positions, p);
  ensure_attention_workspace(attention_workspace_bytes(ctx_, n, p, kv.span, /*rows_apart=*/true));
  const int32_t* d_pos = upload_ints(positions, n, 1);
  submit<&cuda::attention_rows>(Ten(out), Ten(q), kv, table, d_pos, packed(p));
}

void CudaBackend::gated_delta_mixer_rows(const Tensor& normed, const Tensor& qkv,
                                         const Tensor* conv_states, const Tensor& conv_w,
                                         const Tensor& a, const Tensor& b, const Tensor& a_log,
                                         const Tensor& dt_bias, const Tensor* states,
                                         const GatedDeltaParams& p, const Tensor& norm_w,
                                         const Tensor& z, float eps, const GatedDeltaScratch& s) {
  bind();
  const int64_t n = qkv.rows();
  // The table of states: (recurrent, conv) addresses per row, each state of the first's shape.
  std::vector<void*>& table = state_table_;
  table.clear();
  bool same = gdn_mixer_ && normed.device == Device::CUDA && n >= 1;
  for (int64_t r = 0; same && r < n; ++r) {
    const Tensor &st = states[r], &cs = conv_states[r];
    same = st.device == Device::CUDA && cs.device == Device::CUDA && st.dtype == states[0].dtype &&
           st.numel() == states[0].numel() && cs.dtype == conv_states[0].dtype &&
           cs.numel() == conv_states[0].numel() && reinterpret_cast<uintptr_t>(st.data) % 16 == 0;
    table.push_back(st.data);
    table.push_back(cs.data);
  }
  if (same) {
    GdnMixerArgs m = gdn_mixer_args(normed, qkv, conv_states[0], conv_w, a, b, a_log, dt_bias,
                                    states[0], p, norm_w, z, eps, s);
    m.n_rows = int32_t(std::min<int64_t>(n, INT32_MAX));
    if (gated_delta_mixer_fits(m)) {
      static_assert(sizeof(void*) == 8, "a state address is two ints");
      m.states = reinterpret_cast<void* const*>(upload_ints(table.data(), 4 * n, 8));
      submit<&cuda::gated_delta_mixer>(m);
      return;
    }
  }
  Backend::gated_delta_mixer_rows(normed, qkv, conv_states, conv_w, a, b, a_log, dt_bias, states, p,
                                  norm_w, z, eps, s);
}

void CudaBackend::pick_tokens(int32_t* dst, const Tensor& logits, const TokenPick* picks) {
  bind();
  const int64_t m = logits.dim(0);
  if (logits.device != Device::CUDA || logits.dtype != DType::F32 || logits.ndim != 2)
    return Backend::pick_tokens(dst, logits, picks);
  last_pick_on_device_ = false;
  last_pick_host_ = -1;
  if (out_.p) deliver_or_queue_output();
  const size_t bytes = size_t(m) * 4;
  if (bytes > picks_dev_bytes_) regrow_device(&picks_dev_, picks_dev_bytes_, bytes);
  // The rows' scratch grows here, on the host, never inside a capture; its address is part of
  // the record, so a graph never replays with a freed one.
  if (m > pick_rows_) {
    stop_recording();
    pick_rows_ = m;
  }
  void* scratch = cuda::pick_rows_scratch(ctx_, m);
  // All rows through the device picker at once (the kernels of pick_token, a grid row per
  // logits row), into their own slots; then one copy of all the ids.
  auto* ids = static_cast<int32_t*>(picks_dev_);
  std::vector<PickDyn>& dyns = pick_dyns_;
  dyns.clear();
  bool greedy = true;
  for (int64_t r = 0; r < m; ++r) {
    const TokenPick& pick = picks[r];
    dyns.push_back({pick.temperature, pick.top_k, pick.top_p, pick.min_p, pick.u});
    greedy = greedy && pick.temperature <= 0.0f;
  }
  static_assert(sizeof(PickDyn) % 8 == 0, "PickDyn rows stay 8-byte aligned");
  const auto* d_dyn = reinterpret_cast<const PickDyn*>(
      upload_ints(dyns.data(), m * int64_t(sizeof(PickDyn) / 4), 6));
  submit<&cuda::pick_tokens>(ids, Ten(logits), d_dyn, greedy, scratch);
  if (recording_) slot_ += greedy ? 1 : 2;
  Ten t;
  t.p = picks_dev_;
  t.dtype = kF32;  // 4-byte opaque values
  t.ndim = 1;
  t.d[0] = m;
  output_to_host(dst, t, bytes);
}

}  // namespace hearth::cuda
