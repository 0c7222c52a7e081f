// The CUDA backend's class, shared by its files: cuda_backend.cpp (construction and the
// dispatch of every Backend op to its launcher, one .cu per op family), cuda_backend_step.cpp
// (decode steps recorded and replayed as CUDA graphs, the dyn area), cuda_backend_io.cpp
// (device memory, weight upload, host outputs and token picks), cuda_backend_moe.cpp
// (mixture-of-experts routing and expert products) and cuda_backend_rows.cpp (steps of several
// sequences).
//
// Invariants:
// - Every op is enqueued on one stream; nothing synchronises the host inside a step except the
//   copy of a host output (logits) at its end.
// - Host-side inputs (token ids, positions, rope frequencies, the cache's first position, MoE
//   rows) are copied into a pinned "dyn" area and kernels read them from its device mirror. In a
//   recorded step (begin_step(1..8) ... end_step, or begin_batch_step of one token per
//   sequence) ops are not launched but appended as records (launcher + its plain-data
//   arguments). At the end, if the records equal those of the last
//   captured graph, only the dyn values changed: the graph is replayed after a copy of the
//   step's dyn values to the device. Otherwise the records are captured into a new graph. A
//   recorded step's values go to one of kDynAreas pinned areas in turn, so the host can record
//   a step while the previous one (picked ahead) still waits for its copy.
// - Anything that needs the host mid-step (alloc, copy_from_host, growing a buffer) first runs
//   the records so far eagerly and leaves the step unrecorded.
// - Outputs whose Tensor::device is CPU (the model's logits) are computed into a device f32
//   buffer and copied out at the step's end (immediately outside a step).
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/common.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_step.h"
#include "backend/cuda/moe.h"
#include "backend/expert_rows.h"

namespace hearth::cuda {

constexpr int64_t kDynInts = 1 << 20;       // 4 MiB pinned, mirrored on the device
constexpr int64_t kGraphDynInts = 1 << 18;  // [0, this): a recorded step's values
constexpr int kDynAreas = 3;                // host areas of recorded steps' values, in turn
constexpr int kAheadSlots = 8;              // tokens picked ahead and not yet taken, at most
constexpr size_t kLtWorkspace = 32u << 20;
constexpr size_t kUploadChunk = 64u << 20;
constexpr size_t kDequantBytes = 256u << 20;  // prefill's dequantized rows of a packed weight
constexpr int kBatchGemvRows = 1;             // bf16 GEMV rows in a step of several sequences
constexpr int64_t kBatchGraphRows = 512;      // decode steps of up to this many sequences: graphs
constexpr size_t kBatchGraphs = 48;           // graphs of such steps kept (least recently used go)
// Stacked products (q|k|v, gate|up as one GEMM) up to this many rows: a decode step's small
// products gain most (docs/cuda.md). A prompt chunk's products are large enough alone, and
// copying the stacked output's columns out cost 1.5 % of pp512 on an H100.
constexpr int64_t kStackedRows = 256;
// --deterministic: keys per attention split-K piece (counted back from each row's newest key),
// so rows of up to 64 pieces (131,072 positions) split the same at any row count.
constexpr int kDeterministicSplitKeys = 2048;

// Zero-padded copies of the parameter structs, so records compare bytewise.
inline AttentionParams packed(const AttentionParams& p) {
  AttentionParams q;
  std::memset(static_cast<void*>(&q), 0, sizeof q);
  q.n_head = p.n_head;
  q.n_head_kv = p.n_head_kv;
  q.head_dim = p.head_dim;
  q.scale = p.scale;
  q.softcap = p.softcap;
  q.window = p.window;
  return q;
}
inline GatedDeltaParams packed(const GatedDeltaParams& p) {
  GatedDeltaParams q;
  std::memset(static_cast<void*>(&q), 0, sizeof q);
  q.n_k_heads = p.n_k_heads;
  q.n_v_heads = p.n_v_heads;
  q.k_dim = p.k_dim;
  q.v_dim = p.v_dim;
  q.chunked = p.chunked;
  q.chunk = p.chunk;
  return q;
}

// A recorded op: its launcher and plain-data arguments, serialised into a step's blob.
template <typename T>
inline void put(std::vector<uint8_t>& blob, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const size_t at = blob.size();
  blob.resize(at + sizeof(T));
  std::memcpy(blob.data() + at, &v, sizeof(T));
}

template <typename T>
inline T take(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

// Calls launcher Fn with arguments read back from a record's bytes, in order.
template <auto Fn, typename... A>
inline void invoke(Ctx& ctx, const uint8_t* p) {
  std::tuple<A...> args{take<A>(p)...};  // braced init: evaluated left to right
  std::apply([&](const A&... a) { Fn(ctx, a...); }, args);
}

using Invoker = void (*)(Ctx&, const uint8_t*);
struct Record {
  Invoker fn;
  size_t offset, size;
};

inline void launch_d2h(Ctx& ctx, void* dst_pinned, const void* src, size_t bytes) {
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst_pinned, src, bytes, cudaMemcpyDeviceToHost, ctx.stream));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return name_; }
  Device device() const override { return Device::CUDA; }
  DType activation_dtype() const override { return DType::BF16; }

  DeviceBuffer alloc(size_t bytes) override;
  size_t memory_available() const override;

  // Weights are uploaded once and owned here. 2-D F16 matrices become BF16 (one GEMM/GEMV path;
  // bf16 keeps f16's precision within 3 bits and has f32's range); F32 and BF16 stay as stored
  // (F32 1-D/2-D parameters such as norm gains, conv taps and gate constants are read as f32).
  Tensor prepare_weight(const Tensor& host) override;
  // bf16 matrices of the same columns uploaded as consecutive row ranges of one allocation, so
  // that linear_many and linear_glu can run them as one GEMM (stacked_weight); others alone.
  void prepare_weights_stacked(const Tensor* host, int n, Tensor* out) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override;

  void linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                   const InputNorm* norm) override;

  void linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x, const LinearOut& gate,
                  const LinearOut& up, Activation act, const InputNorm* norm) override;

  void linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                       float scale) override;

  // Products of one input by weights that are consecutive row ranges of one bf16 matrix, for
  // more rows than the GEMV takes: that matrix as one tensor, or an empty one when the outputs
  // or weights do not allow it (then each product runs alone).
  Tensor stacked_weight(const Tensor& x, const LinearOut* outs, int n_outs) const;
  // The stacked GEMM's output [rows, cols] in stacked_out_ (grown as needed).
  Ten stacked_output(int64_t rows, int64_t cols, DType dtype);

  // Whether the GEMV can apply `norm` (none, or a per-row gain of x's width within its
  // shared-memory budget), and the norm as the launcher's plain record.
  static bool gemv_takes_norm(const Tensor& x, const InputNorm* norm);
  static GemvNorm gemv_norm(const InputNorm* norm);
  // Whether the GEMV takes weight w (bf16 for at most ctx_.gemv_max_rows rows, or packed in a
  // format it decodes) for input x, and the weight as its launcher's plain record.
  bool gemv_weight(const Tensor& x, const Tensor& w, GemvWeight& g) const;

  void qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                          const Tensor& k_norm, float eps, float off, const RopeParams* rope,
                          const KvView& kv, const int32_t* positions) override;

  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) override;
  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps, float off) override;
  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rp) override;

  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override;

  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& p) override;

  // Steps of several sequences (cuda_backend_rows.cpp): their caches go to the kernels as a
  // table in the dyn area, so one launch serves every row.
  void qk_norm_rope_store_rows(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& q_norm, const Tensor& k_norm, float eps, float off,
                               const RopeParams* rope, const KvView* kvs,
                               const int32_t* positions) override;
  void attention_rows(const Tensor& out, const Tensor& q, const KvView* kvs,
                      const int32_t* positions, const AttentionParams& p) override;
  void gated_delta_mixer_rows(const Tensor& normed, const Tensor& qkv, const Tensor* conv_states,
                              const Tensor& conv_w, const Tensor& a, const Tensor& b,
                              const Tensor& a_log, const Tensor& dt_bias, const Tensor* states,
                              const GatedDeltaParams& p, const Tensor& norm_w, const Tensor& z,
                              float eps, const GatedDeltaScratch& scratch) override;
  void pick_tokens(int32_t* dst, const Tensor& logits, const TokenPick* picks) override;
  // A step of one token for each of several sequences is recorded and replayed as a graph of its
  // own for that many rows: the rows' caches and states reach the kernels through tables in the
  // dyn area, so the records repeat while the sequences change. Steps with prompt chunks run as
  // they come.
  void begin_batch_step(int64_t n_tokens, int64_t n_sequences) override;

  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override;
  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override;
  void scale(const Tensor& x, float s) override;
  void softcap(const Tensor& x, float cap) override;
  void to_host_f32(float* dst, const Tensor& src) override;
  void pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) override;

  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override;
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override;
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& p) override;
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override;
  // One kernel for a one-token call of the shapes gated_delta_mixer_fits takes (sm_90+, unless
  // CudaOptions::gdn_mixer is off); otherwise the four ops (the default).
  void gated_delta_mixer(const Tensor& normed, const Tensor& qkv, const Tensor& conv_state,
                         const Tensor& conv_w, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias, const Tensor& state,
                         const GatedDeltaParams& p, const Tensor& norm_w, const Tensor& z,
                         float eps, const GatedDeltaScratch& scratch) override;
  // The one-kernel mixer's arguments for these tensors (n_rows 0: one row).
  static GdnMixerArgs gdn_mixer_args(const Tensor& normed, const Tensor& qkv,
                                     const Tensor& conv_state, const Tensor& conv_w,
                                     const Tensor& a, const Tensor& b, const Tensor& a_log,
                                     const Tensor& dt_bias, const Tensor& state,
                                     const GatedDeltaParams& p, const Tensor& norm_w,
                                     const Tensor& z, float eps, const GatedDeltaScratch& s);
  void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) override;
  void fill(const Tensor& y, float value) override;
  void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) override;
  void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                        const float* weights) override;

  // Routing on the device. Decode-sized batches then run the experts from device memory
  // (moe_decode: no host round trip, so the step stays one graph); larger ones (and decode
  // shapes moe_decode does not take) bring the routing to the host and run grouped products.
  // Weights other than bf16, or more experts than a routing warp holds: the composed default.
  int64_t moe_experts(const Tensor& y, const Tensor& x, const Tensor& logits, const MoeExperts& ex,
                      const MoeScratch& s) override;

  // The persistent one-kernel decode step (decode_step.cu) where it applies: bf16 weights and
  // caches, heads of 64 or 128 (llama family) or 128 or 256 (Qwen3.5 hybrids), at most 512 keys;
  // by default for layers of 24 MB or more (CudaOptions::decode_step).
  // cuda_backend_decode.cpp.
  bool decode_layers(const DecodeLayers& step) override;

  // The grouped path gives every (token, slot) pair its own row.
  int64_t moe_scratch_rows(int64_t n_tokens, int64_t k) const override { return n_tokens * k; }

  void begin_step(int64_t n_tokens) override;
  void end_step() override;
  // begin_step's work; a step that is not recordable runs as it comes. `slot` names the graph
  // the step's records are compared with (a pick adds its kind later).
  void open_step(bool recordable, int64_t slot);

  // Picking ahead (cuda_backend_io.cpp): the pick's token is copied to a pinned slot of its own
  // after the step, and the next step's embedding reads it from device memory.
  bool picks_ahead() const override { return true; }
  void pick_token_ahead(const Tensor& logits, const TokenPick& pick) override;
  int32_t take_picked_token() override;
  void embedding_of_pick(const Tensor& y, const Tensor& table, float scale) override;

  // Test hooks: graphs off (every step eager), and how many graphs were captured / replayed.
  void set_graphs_enabled(bool on) { graphs_enabled_ = on; }
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t graphs_replayed() const { return graphs_replayed_; }

 private:
  // The calling thread's current device must be ours (the server may call from any thread).
  void bind() const {
    thread_local int current = -1;
    if (current != device_) {
      HEARTH_CUDA_CHECK(cudaSetDevice(device_));
      current = device_;
    }
  }

  template <auto Fn, typename... A>
  void submit(const A&... a) {
    if (!recording_) {
      Fn(ctx_, a...);
      return;
    }
    Record r{&invoke<Fn, A...>, blob_.size(), 0};
    (put(blob_, a), ...);
    r.size = blob_.size() - r.offset;
    recs_.push_back(r);
  }

  // --- mixture of experts ---

  // Whether the device paths take this layer: f32 logits [n, E] and bf16 expert matrices of
  // the shapes moe_experts documents, x and y on the device, E and k within a routing warp,
  // ids/weights [n, k].
  static bool moe_supported(const Tensor& y, const Tensor& x, const Tensor& logits,
                            const MoeExperts& ex, const MoeScratch& s);

  static bool moe_aligned(const MoeExperts& ex);

  struct MoeMats {
    MoeMat gate, up, down;
  };

  // Experts that are equally strided slices of one tensor (the fused and MLX layouts) are
  // addressed as base + e·stride; any other arrangement through a device pointer table.
  MoeMats moe_mats(const MoeExperts& ex);
  static bool moe_strided(const Tensor* mats, int64_t E, MoeMat& m);

  // The device table of a layer's 3·E matrix addresses (gate, up, down), kept per layer (keyed
  // by its first gate matrix) and rebuilt when the addresses change. Building it copies from
  // the host, so a recorded step runs eagerly up to here (once per layer).
  const void* const* moe_table(const MoeExperts& ex);

  // The routing brought to the host (one sync per layer), the routed rows gathered in expert
  // order, per-expert products on row slices of the scratch (GEMV or cuBLASLt by rows), one GLU
  // over all rows, and a combine in slot order. Returns the number of active experts.
  int64_t moe_grouped(const Tensor& y, const Tensor& x, const Tensor& logits, const MoeExperts& ex,
                      const MoeScratch& s);

  // out's rows of each active expert = in's same rows · w[e]ᵀ (rows grouped by ExpertRows):
  // one grouped cuBLAS call for all experts (bf16 rows of ≥ 16-byte alignment), else one
  // product per expert. `tag` names the pointer upload (upload_ints) of this projection.
  void moe_products(const Tensor& out, const Tensor& in, const Tensor* w, int tag);

  // The cache view the kernels take: its block table and first position through the dyn area.
  // Refuses (hearth::Error) a view that is not paged in 64-position blocks of 16-byte aligned
  // rows: KvCache makes every cache so.
  KvDev kv_dev(const KvView& kv);
  // kv's block table in the dyn area, padded with nulls to a power of two of at least 4 entries
  // (*span: the positions they cover), so the table's size and the grids sized by it change
  // only when a sequence doubles.
  void* const* upload_kv_table(const KvView& kv, int64_t* span);
  // Whether the one-kernel attention input (qk_norm_rope_store's kernel) takes these shapes:
  // per-head norms or none, q [n, heads, head_dim], a rotary width it fits.
  static bool qk_norm_rope_store_fused(const Tensor& q, const Tensor& k, const Tensor& q_norm,
                                       const Tensor& k_norm, int32_t rotary_dim);
  // Grows the split-K attention workspace (ctx_.attn_ws) to at least `bytes`.
  void ensure_attention_workspace(size_t bytes);
  // The caches of a step's rows as the kernels' table (SeqKv) in the dyn area, every row's
  // block table uploaded back to back; *kv gets the layer's offsets and the largest span. Null
  // when the rows' layers lie at different offsets in their blocks (then they go one by one).
  const SeqKv* upload_seq_kvs(const KvView* kvs, int64_t n, KvDev* kv);

  // Copies n 4-byte host values into the dyn area and returns their device address. Equal
  // contents of the same kind (tag) share a slot, so a step's positions upload once.
  const int32_t* upload_ints(const void* src, int64_t n, int tag);

  // Ends the recorded step early: runs the records so far eagerly; the rest of the step is eager.
  void stop_recording();
  void invalidate_graph();
  bool records_match() const;

  // End of a recorded step: replay the graph (or capture a new one), then deliver host outputs.
  void finish_recording();
  void submit_recorded_d2h();
  void capture();
  // The recorded step's values: their host area, where `at` of the dyn area lies on the host,
  // and the copy of the area to the device before the step's work (then the next area).
  int32_t* graph_dyn_host() const { return graph_dyn_host_ + dyn_area_ * kGraphDynInts; }
  int32_t* dyn_host_at(int64_t at) const {
    return at < kGraphDynInts ? graph_dyn_host() + at : dyn_host_ + at;
  }
  void copy_graph_dyn();
  // The graph slot's kind for a pick: greedy or sampled, and whether the step's input is the
  // previous pick (embedding_of_pick), so each keeps its own graph.
  int64_t pick_slot_offset(bool greedy) const {
    return int64_t((greedy ? 1 : 2) + (picked_input_ ? 2 : 0)) * kGraphTokens;
  }

  // --- packed weights (cuda_backend_packed.cpp) ---

  // Uploads the codes, scales and biases; sizes the scratch the weight's products need.
  Tensor prepare_packed(const Tensor& host);
  // y = x · Wᵀ (+ bias) for a packed W: the decode kernel for ≤ 8 rows, else W dequantized to
  // bf16 in slices of rows of at most kDequantBytes, each through the GEMM.
  void linear_packed(const Ten& y, const Tensor& x, const Tensor& w, const Tensor& bias);
  // The same in deterministic mode: dequantized slices through linear_fixed at any row count.
  void linear_packed_fixed(const Ten& y, const Tensor& x, const PackedTen& p, const Tensor& bias);
  // x += (in · Wᵀ + bias) * scale for a transposed trellis W in the decode kernels (their sum of
  // partials adds into x); false when they do not take it.
  bool packed_residual(const Tensor& x, const Tensor& in, const LinearOut& proj, float scale);
  // Grows the transposed trellis products' partial sums to what p needs (regrow_device).
  void ensure_partials(const PackedTen& p);
  // Either product, by w's format.
  void submit_linear(const Ten& y, const Tensor& x, const Tensor& w, const Tensor& bias);

  // --- host outputs (logits) ---

  void linear_to_host(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias);
  // The picker's launch into token_dev_ (pick_token and pick_token_ahead), and its graph slot.
  void submit_pick(const Tensor& logits, const TokenPick& pick);
  const Ten* pending_host_output(const Tensor& x) const;
  void deliver_or_queue_output();
  // `bytes` of src (device) to dst (host) as the step's host output: at once outside a recorded
  // step, else after its graph (none may be pending).
  void output_to_host(void* dst, const Ten& src, size_t bytes);
  void deliver_now();
  void finish_delivery();
  void ensure_out_host(size_t bytes);
  void grow_device(void** p, size_t& have, size_t need);
  // A device scratch buffer replaced by a larger one (at least need bytes) outside any recorded
  // step: the step so far runs eagerly, the stream drains, and captured graphs are dropped.
  void regrow_device(void** p, size_t& have, size_t need);

  // Host → device through two pinned buffers: the CPU fills one (threads, from the mapped file)
  // while the copy engine drains the other.
  void upload(void* dst, const void* src, size_t bytes);

  struct DedupEntry {
    int tag;
    int64_t n, offset;
  };

  // Device memory (cuda_backend_io.cpp): a DeviceBuffer's deleter gives its block back to its
  // backend's free blocks (by size), which alloc() reuses; release_free_blocks() returns them to
  // the driver (when cudaMalloc fails, and at destruction); disown_blocks() leaves blocks that
  // outlive the backend to be freed by their buffers.
  static void give_back_block(void* p);
  void release_free_blocks();
  void disown_blocks();
  // cudaMalloc, after giving the free blocks back to the driver if it fails at first; null when
  // the device has no room.
  void* device_malloc(size_t bytes);
  std::multimap<size_t, void*> free_blocks_;  // guarded by the blocks' mutex
  size_t free_block_bytes_ = 0;

  int device_;
  std::string name_;
  Ctx ctx_;
  std::vector<DeviceBuffer> weights_;
  std::vector<void*> staging_;
  std::vector<cudaEvent_t> staging_done_;

  int32_t* dyn_host_ = nullptr;
  int32_t* dyn_dev_ = nullptr;
  int64_t ring_ = 0, graph_cursor_ = 0;
  std::vector<DedupEntry> dedup_;

  bool graphs_enabled_ = true, recording_ = false;
  const CudaOptions options_;
  // The GEMV's row limit in a step (Ctx::gemv_max_rows): `rows`, or none when deterministic.
  int gemv_rows(int rows) const { return options_.deterministic ? 0 : rows; }
  bool gdn_mixer_ = false;  // the one-kernel Gated DeltaNet mixer: on, and the device has clusters
  int decode_blocks_ = 0;   // the one-kernel step's grid: the SM count or options_.decode_blocks
  std::vector<Record> recs_;
  std::vector<uint8_t> blob_;
  // Captured graphs with the records each was captured from, by slot.
  struct GraphSlot {
    cudaGraphExec_t exec = nullptr;
    std::vector<Record> recs;
    std::vector<uint8_t> blob;
    int64_t cursor = 0;
    int64_t last_used = 0;  // the step count when it last ran (batch slots are evicted by it)
  };
  static constexpr int64_t kGraphTokens = 8;
  // Slots of one sequence's steps of n = 1..kGraphTokens tokens: n (logits to the host),
  // n + kGraphTokens (greedy pick), n + 2·kGraphTokens (sampled), n + 3·kGraphTokens and
  // n + 4·kGraphTokens (the same with the previous pick as input). Steps of n sequences:
  // kBatchSlots + 4·n, plus 1 (greedy picks) or 2 (sampled).
  static constexpr int64_t kBatchSlots = 8 * kGraphTokens;
  static bool is_batch_slot(int64_t slot) { return slot >= kBatchSlots; }
  std::map<int64_t, GraphSlot> graphs_;
  int64_t slot_ = 0;
  int64_t steps_recorded_ = 0;
  // Drops the least recently used batch graph while more than kBatchGraphs are kept (no step
  // in flight: called before a capture).
  void evict_batch_graphs();
  bool picked_input_ = false;  // this recorded step embeds the previous pick
  // Host areas of recorded steps' values (kDynAreas · kGraphDynInts ints, pinned), the one in
  // use, and for each the event after its copy to the device.
  int32_t* graph_dyn_host_ = nullptr;
  int dyn_area_ = 0;
  std::array<cudaEvent_t, kDynAreas> dyn_copied_{};
  // Picks ahead: their pinned slots and events, the queue (slot, or -1 and the token for a pick
  // made on the host), the next slot, and where the last pick's token lies.
  struct AheadPick {
    int slot;
    int32_t token;
  };
  int32_t* ahead_host_ = nullptr;
  std::array<cudaEvent_t, kAheadSlots> ahead_ready_{};
  std::deque<AheadPick> ahead_;
  int ahead_next_ = 0;
  bool last_pick_on_device_ = false;  // in token_dev_
  int32_t last_pick_host_ = -1;       // else here (-1: none)
  int64_t graphs_captured_ = 0, graphs_replayed_ = 0;

  // The pending host output: device f32 source, pinned staging, the caller's pointer.
  Ten out_;
  void* out_user_ = nullptr;
  size_t out_bytes_ = 0;
  bool out_queued_ = false;
  void* out_dev_ = nullptr;
  size_t out_dev_bytes_ = 0;
  void* out_host_ = nullptr;
  size_t out_host_bytes_ = 0;
  void* tmp_dev_ = nullptr;
  size_t tmp_bytes_ = 0;
  void* token_dev_ = nullptr;  // pick_token's result
  void* picks_dev_ = nullptr;  // pick_tokens' results
  // The tables of a step of several sequences, reused (host side, before upload).
  std::vector<SeqKv> seq_table_;
  std::vector<void*> block_table_;
  std::vector<void*> state_table_;
  std::vector<PickDyn> pick_dyns_;
  std::vector<KvView> det_views_;  // attention's rows in deterministic mode (host side)
  size_t picks_dev_bytes_ = 0;
  int64_t pick_rows_ = 0;  // rows of pick_tokens' scratch asked for so far
  // Packed weights: the transposed-trellis products' partial sums, and prefill's bf16 rows.
  void* packed_partials_ = nullptr;
  size_t packed_partials_bytes_ = 0;
  void* dequant_ = nullptr;
  size_t dequant_bytes_ = 0;
  // The stacked products' output before its columns go to their tensors (stacked_output).
  void* stacked_out_ = nullptr;
  size_t stacked_out_bytes_ = 0;

  // MoE: per-layer expert address tables, the grouped path's host copy of the routing (pinned)
  // and its rows grouped by expert.
  struct MoeTable {
    std::vector<const void*> host;
    DeviceBuffer dev;
  };
  std::map<const void*, MoeTable> moe_tables_;
  // decode_layers: the layer table on the device (rebuilt when a layer's addresses change),
  // and the scratch (q, k, v, attention output, MLP hidden) with the grid barrier's words.
  std::vector<StepLayerDev> step_layers_host_;
  DeviceBuffer step_layers_dev_;
  void* step_ws_ = nullptr;
  size_t step_ws_bytes_ = 0;
  int32_t* moe_ids_host_ = nullptr;
  size_t moe_ids_host_n_ = 0;
  ExpertRows moe_rows_;
};

}  // namespace hearth::cuda
