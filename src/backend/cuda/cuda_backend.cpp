// The CUDA backend: memory, weight upload, and the dispatch of every Backend op to its launcher
// (one .cu per op family), with decode steps recorded and replayed as CUDA graphs.
//
// Invariants:
// - Every op is enqueued on one stream; nothing synchronises the host inside a step except the
//   copy of a host output (logits) at its end.
// - Host-side inputs (token ids, positions, rope frequencies, the cache's first position, MoE
//   rows) are copied into a pinned "dyn" area and kernels read them from its device mirror. In a
//   recorded step (begin_step(1) ... end_step) ops are not launched but appended as records
//   (launcher + its plain-data arguments). At the end, if the records equal those of the last
//   captured graph, only the dyn values changed: the graph (whose first node copies the dyn
//   area to the device) is replayed. Otherwise the records are captured into a new graph.
// - Anything that needs the host mid-step (alloc, copy_from_host, growing a buffer) first runs
//   the records so far eagerly and leaves the step unrecorded.
// - Outputs whose Tensor::device is CPU (the model's logits) are computed into a device f32
//   buffer and copied out at the step's end (immediately outside a step).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/common.h"
#include "backend/cuda/moe.h"
#include "backend/expert_rows.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace hearth {

namespace cuda {

void cuda_fail(const char* call, const char* error, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  fail("CUDA error: {} failed: {} ({}:{})", call, error, base ? base + 1 : file, line);
}

namespace {

void launch_d2h(Ctx& ctx, void* dst_pinned, const void* src, size_t bytes) {
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst_pinned, src, bytes, cudaMemcpyDeviceToHost, ctx.stream));
}

template <typename T>
void put(std::vector<uint8_t>& blob, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const size_t at = blob.size();
  blob.resize(at + sizeof(T));
  std::memcpy(blob.data() + at, &v, sizeof(T));
}

template <typename T>
T take(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

// Calls launcher Fn with arguments read back from a record's bytes, in order.
template <auto Fn, typename... A>
void invoke(Ctx& ctx, const uint8_t* p) {
  std::tuple<A...> args{take<A>(p)...};  // braced init: evaluated left to right
  std::apply([&](const A&... a) { Fn(ctx, a...); }, args);
}

using Invoker = void (*)(Ctx&, const uint8_t*);
struct Record {
  Invoker fn;
  size_t offset, size;
};

// Zero-padded copies of the parameter structs, so records compare bytewise.
AttentionParams packed(const AttentionParams& p) {
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
GatedDeltaParams packed(const GatedDeltaParams& p) {
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

constexpr int64_t kDynInts = 1 << 20;       // 4 MiB pinned, mirrored on the device
constexpr int64_t kGraphDynInts = 1 << 16;  // [0, this): a recorded step's values
constexpr size_t kLtWorkspace = 32u << 20;
constexpr size_t kUploadChunk = 64u << 20;

void free_device(void* p) { cudaFree(p); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    const int count = cuda_device_count();
    if (count == 0) fail("device 'cuda:{}': no CUDA device is available", device);
    if (device < 0 || device >= count)
      fail("device 'cuda:{}' does not exist ({} CUDA device(s) present)", device, count);
    HEARTH_CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = std::string("cuda:") + std::to_string(device_) + " (" + prop.name + ")";
    ctx_.sm_count = prop.multiProcessorCount;
    const char* pdl = std::getenv("HEARTH_CUDA_PDL");
    ctx_.pdl = prop.major >= 9 && !(pdl && std::string(pdl) == "0");
    // Measurement switches: sampled picks on the host instead of the device (=host), and
    // prefill's residual add composed instead of in the GEMM's accumulate (=0).
    const char* sampling = std::getenv("HEARTH_CUDA_SAMPLING");
    device_sampling_ = !(sampling && std::string(sampling) == "host");
    const char* accumulate = std::getenv("HEARTH_CUDA_GEMM_ACCUMULATE");
    gemm_accumulate_ = !(accumulate && std::string(accumulate) == "0");
    HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    HEARTH_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    HEARTH_CUDA_CHECK(cudaMalloc(&ctx_.lt_workspace, kLtWorkspace));
    ctx_.lt_workspace_bytes = kLtWorkspace;
    HEARTH_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&dyn_host_), kDynInts * 4, cudaHostAllocDefault));
    HEARTH_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dyn_dev_), kDynInts * 4));
    HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&graph_done_, cudaEventDisableTiming));
    ring_ = kGraphDynInts;
    attention_init();
    gemv_init();
    pick_token_init(ctx_);
    gated_delta_init();
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(ctx_.stream);
    for (GraphSlot& g : graphs_)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    weights_.clear();
    moe_tables_.clear();
    linear_plans_clear();
    cudaFree(ctx_.attn_ws);
    cudaFree(ctx_.lt_workspace);
    cudaFree(out_dev_);
    cudaFree(tmp_dev_);
    cudaFree(token_dev_);
    cudaFreeHost(out_host_);
    cudaFreeHost(dyn_host_);
    cudaFreeHost(moe_ids_host_);
    cudaFree(dyn_dev_);
    for (void* p : staging_) cudaFreeHost(p);
    cudaEventDestroy(graph_done_);
    cublasLtDestroy(ctx_.lt);
    if (ctx_.blas) cublasDestroy(ctx_.blas);
    cudaStreamDestroy(ctx_.stream);
  }

  std::string name() const override { return name_; }
  Device device() const override { return Device::CUDA; }
  DType activation_dtype() const override { return DType::BF16; }

  DeviceBuffer alloc(size_t bytes) override {
    bind();
    stop_recording();
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("CUDA out of memory on cuda:{} allocating {:.1f} MiB ({:.1f} of {:.1f} GiB free): {}",
           device_, double(bytes) / (1 << 20), double(free_b) / (1 << 30),
           double(total_b) / (1 << 30), cudaGetErrorString(err));
    }
    return DeviceBuffer(p, bytes, Device::CUDA, free_device);
  }

  // Weights are uploaded once and owned here. 2-D F16 matrices become BF16 (one GEMM/GEMV path;
  // bf16 keeps f16's precision within 3 bits and has f32's range); F32 and BF16 stay as stored
  // (F32 1-D/2-D parameters such as norm gains, conv taps and gate constants are read as f32).
  Tensor prepare_weight(const Tensor& host) override {
    bind();
    if (host.device == Device::CUDA) return host;
    const bool to_bf16 = host.dtype == DType::F16 && host.ndim == 2;
    const DType dtype = to_bf16 ? DType::BF16 : host.dtype;
    DeviceBuffer buf = alloc(host.nbytes());
    upload(buf.data(), host.data, host.nbytes());
    if (to_bf16) {
      // Same size (2 bytes per element): convert in place through a temporary.
      DeviceBuffer tmp = alloc(host.nbytes());
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(tmp.data(), buf.data(), host.nbytes(),
                                        cudaMemcpyDeviceToDevice, ctx_.stream));
      Ten src(host), dst(host);
      src.p = tmp.data();
      dst.p = buf.data();
      dst.dtype = kBF16;
      cuda::convert(ctx_, dst, src);
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    }
    Tensor t = host;
    t.data = buf.data();
    t.dtype = dtype;
    t.device = Device::CUDA;
    weights_.push_back(std::move(buf));
    return t;
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    bind();
    if (src.device == Device::CPU) return copy_from_host(dst, src.data);
    submit<&cuda::copy_bytes>(Ten(dst), Ten(src));
  }

  void copy_from_host(const Tensor& dst, const void* src) override {
    bind();
    stop_recording();
    HEARTH_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, ctx_.stream));
  }

  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override {
    bind();
    if (y.device == Device::CPU) return linear_to_host(y, x, w, bias);
    submit<&cuda::linear>(Ten(y), Ten(x), Ten(w), Ten(bias));
  }

  void linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                   const InputNorm* norm) override {
    bind();
    bool fits = n_outs <= kGemvMaxSegs && gemv_takes_norm(x, norm);
    for (int i = 0; i < n_outs; ++i)
      fits = fits && outs[i].y.device == Device::CUDA && gemv_fits(Ten(x), Ten(outs[i].w));
    if (!fits) return Backend::linear_many(x, outs, n_outs, norm);
    GemvJobs jobs;
    for (int i = 0; i < n_outs; ++i) {
      const LinearOut& o = outs[i];
      jobs.y[jobs.n] = Ten(o.y);
      jobs.w[jobs.n] = Ten(o.w);
      jobs.bias[jobs.n] = Ten(o.bias);
      ++jobs.n;
    }
    submit<&cuda::gemv_many>(Ten(x), jobs, gemv_norm(norm));
  }

  void linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x, const LinearOut& gate,
                  const LinearOut& up, Activation act, const InputNorm* norm) override {
    bind();
    if (!gemv_fits(Ten(x), Ten(gate.w)) || !gemv_fits(Ten(x), Ten(up.w)) ||
        !gemv_takes_norm(x, norm))
      return Backend::linear_glu(y, up_scratch, x, gate, up, act, norm);
    submit<&cuda::gemv_glu>(Ten(y), Ten(x), Ten(gate.w), Ten(gate.bias), Ten(up.w), Ten(up.bias),
                            int32_t(act), gemv_norm(norm));
  }

  void linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                       float scale) override {
    bind();
    const bool same = x.dtype == proj.y.dtype && x.numel() == proj.y.numel();
    if (same && gemv_fits(Ten(in), Ten(proj.w)))
      return submit<&cuda::gemv_residual>(Ten(x), scale, Ten(in), Ten(proj.w), Ten(proj.bias),
                                          int32_t(proj.y.dtype));
    // Prefill: the add rides in the GEMM (not recorded: graphs hold decode steps only).
    if (same && proj.bias.empty() && !recording_ && gemm_accumulate_ &&
        cuda::linear_accumulate(ctx_, Ten(x), Ten(in), Ten(proj.w), scale))
      return;
    Backend::linear_residual(x, in, proj, scale);
  }

  // Whether the GEMV can apply `norm` (none, or a per-row gain of x's width within its
  // shared-memory budget), and the norm as the launcher's plain record.
  static bool gemv_takes_norm(const Tensor& x, const InputNorm* norm) {
    return !norm || (norm->w.device == Device::CUDA && gemv_norm_fits(Ten(x), Ten(norm->w)));
  }
  static GemvNorm gemv_norm(const InputNorm* norm) {
    GemvNorm g;
    if (norm) {
      g.w = Ten(norm->w);
      g.eps = norm->eps;
      g.offset = norm->offset;
    }
    return g;
  }

  void qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                          const Tensor& k_norm, float eps, float off, const RopeParams* rope,
                          const KvView& kv, const int32_t* positions) override {
    bind();
    const int64_t hd = q.dim(2);
    const int32_t rot = rope ? int32_t(rope->rotary_dim) : 0;
    const bool per_head = (q_norm.empty() || q_norm.numel() == hd) &&
                          (k_norm.empty() || k_norm.numel() == hd) &&
                          q_norm.empty() == k_norm.empty();
    if (!per_head || !qk_rope_store_fits(hd, rot) || q.ndim != 3 || k.dim(2) != hd)
      return Backend::qk_norm_rope_store(q, k, v, q_norm, k_norm, eps, off, rope, kv, positions);
    const int32_t* d_pos = upload_ints(positions, q.dim(0), 1);
    const float* d_freq =
        rot > 0 ? reinterpret_cast<const float*>(upload_ints(rope->inv_freq, rot / 2, 2)) : nullptr;
    submit<&cuda::qk_norm_rope_store>(Ten(q), Ten(k), Ten(v), Ten(q_norm), Ten(k_norm), eps, off,
                                      kv_dev(kv), d_pos, d_freq, rot,
                                      rope ? rope->attention_factor : 1.0f);
  }

  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) override {
    bind();
    const int32_t* d_ids = upload_ints(ids, y.rows(), 0);
    submit<&cuda::embedding>(Ten(y), Ten(table), d_ids, s);
  }

  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps, float off) override {
    bind();
    submit<&cuda::rms_norm>(Ten(y), Ten(x), Ten(w), eps, off);
  }

  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rp) override {
    bind();
    const int32_t* d_pos = upload_ints(positions, x.dim(0), 1);
    const float* d_freq =
        reinterpret_cast<const float*>(upload_ints(rp.inv_freq, rp.rotary_dim / 2, 2));
    submit<&cuda::rope>(Ten(x), d_pos, d_freq, int32_t(rp.rotary_dim), rp.attention_factor);
  }

  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override {
    bind();
    const int32_t* d_pos = upload_ints(positions, k.dim(0), 1);
    submit<&cuda::kv_store>(kv_dev(kv), Ten(k), Ten(v), d_pos);
  }

  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& p) override {
    bind();
    const size_t ws = attention_workspace_bytes(ctx_, q.dim(0), p, kv.capacity);
    if (ws > ctx_.attn_ws_bytes) {
      stop_recording();
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      cudaFree(ctx_.attn_ws);
      ctx_.attn_ws = nullptr;
      size_t have = ctx_.attn_ws_bytes;
      ctx_.attn_ws_bytes = 0;  // none until the new one exists (grow_device may throw)
      grow_device(reinterpret_cast<void**>(&ctx_.attn_ws), have, ws);
      ctx_.attn_ws_bytes = have;
      // The split-K arrival counters in it start at zero; every launch leaves them so.
      HEARTH_CUDA_CHECK(cudaMemsetAsync(ctx_.attn_ws, 0, have, ctx_.stream));
      invalidate_graph();  // the captured graph holds the old workspace address
    }
    const int32_t* d_pos = upload_ints(positions, q.dim(0), 1);
    submit<&cuda::attention>(Ten(out), Ten(q), kv_dev(kv), d_pos, packed(p));
  }

  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override {
    bind();
    submit<&cuda::glu>(Ten(y), Ten(gate), Ten(up), int32_t(act));
  }

  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override {
    bind();
    submit<&cuda::add>(Ten(y), Ten(a), Ten(b), b_scale);
  }

  void scale(const Tensor& x, float s) override {
    bind();
    if (x.device == Device::CPU) {
      if (const Ten* d = pending_host_output(x)) return submit<&cuda::scale>(*d, s);
      float* p = x.as<float>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= s;
      return;
    }
    submit<&cuda::scale>(Ten(x), s);
  }

  void softcap(const Tensor& x, float cap) override {
    bind();
    if (x.device == Device::CPU) {
      if (const Ten* d = pending_host_output(x)) return submit<&cuda::softcap>(*d, cap);
      float* p = x.as<float>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = std::tanh(p[i] / cap) * cap;
      return;
    }
    submit<&cuda::softcap>(Ten(x), cap);
  }

  void to_host_f32(float* dst, const Tensor& src) override {
    bind();
    const size_t bytes = size_t(src.numel()) * 4;
    Ten s(src);
    if (src.dtype != DType::F32) {
      if (bytes > tmp_bytes_) {
        stop_recording();
        HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
        cudaFree(tmp_dev_);
        tmp_dev_ = nullptr;
        grow_device(&tmp_dev_, tmp_bytes_, bytes);
        invalidate_graph();
      }
      Ten f = s;
      f.p = tmp_dev_;
      f.dtype = kF32;
      submit<&cuda::convert>(f, s);
      s = f;
    }
    if (out_.p) deliver_or_queue_output();  // one pending host output at a time
    ensure_out_host(bytes);
    out_ = s;
    out_user_ = dst;
    out_bytes_ = bytes;
    if (recording_) {
      finish_recording();
    } else {
      deliver_now();
    }
  }

  void pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) override {
    bind();
    // Greedy and sampled picks on the device (multi-block, sampling.cu): a sampled 8B decode
    // step is 12 % faster than bringing the row to the host (docs/PERFORMANCE.md).
    const bool greedy = pick.temperature <= 0.0f;
    const bool on_device = greedy || device_sampling_;
    if (logits.device != Device::CUDA || logits.dtype != DType::F32 || !on_device)
      return Backend::pick_token(dst, logits, pick);
    const PickDyn dyn{pick.temperature, pick.top_k, pick.top_p, pick.min_p, pick.u};
    static_assert(sizeof dyn % 4 == 0);
    const auto* d_dyn =
        reinterpret_cast<const PickDyn*>(upload_ints(&dyn, int64_t(sizeof dyn / 4), 6));
    if (!token_dev_) {
      stop_recording();
      HEARTH_CUDA_CHECK(cudaMalloc(&token_dev_, 16));
      invalidate_graph();
    }
    submit<&cuda::pick_token>(static_cast<int32_t*>(token_dev_), Ten(logits), d_dyn, greedy);
    // Greedy steps launch only the picker's first kernel, so they keep a graph of their own
    // (sampled ones the next set of slots) and alternating requests do not recapture.
    if (recording_) slot_ += size_t(greedy ? 1 : 2) * kGraphTokens;
    // The token leaves as the step's host output (4 bytes instead of the logits row).
    if (out_.p) deliver_or_queue_output();
    ensure_out_host(4);
    Ten t;
    t.p = token_dev_;
    t.dtype = kF32;  // 4 opaque bytes
    t.ndim = 1;
    t.d[0] = 1;
    out_ = t;
    out_user_ = dst;
    out_bytes_ = 4;
    if (recording_) {
      finish_recording();
    } else {
      deliver_now();
    }
  }

  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override {
    bind();
    submit<&cuda::conv1d_causal_silu>(Ten(y), Ten(x), Ten(state), Ten(w));
  }
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override {
    bind();
    submit<&cuda::gated_delta_gates>(Ten(g), Ten(beta), Ten(a), Ten(b), Ten(a_log), Ten(dt_bias));
  }
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& p) override {
    bind();
    submit<&cuda::gated_delta>(Ten(out), Ten(qkv), Ten(g), Ten(beta), Ten(state), packed(p));
  }
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override {
    bind();
    submit<&cuda::rms_norm_gated>(Ten(y), Ten(x), Ten(w), Ten(z), eps);
  }
  void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) override {
    bind();
    submit<&cuda::mul_sigmoid>(Ten(y), Ten(x), Ten(gate));
  }
  void fill(const Tensor& y, float value) override {
    bind();
    submit<&cuda::fill>(Ten(y), value);
  }
  void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) override {
    bind();
    const int32_t* d_rows = upload_ints(rows, y.rows(), 3);
    submit<&cuda::gather_rows>(Ten(y), Ten(x), d_rows);
  }
  void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                        const float* weights) override {
    bind();
    const int32_t* d_rows = upload_ints(rows, x.rows(), 3);
    const float* d_w = reinterpret_cast<const float*>(upload_ints(weights, x.rows(), 4));
    submit<&cuda::scatter_add_rows>(Ten(y), Ten(x), d_rows, d_w);
  }

  // Routing on the device. Decode-sized batches then run the experts from device memory
  // (moe_decode: no host round trip, so the step stays one graph); larger ones (and decode
  // shapes moe_decode does not take) bring the routing to the host and run grouped products.
  // Weights other than bf16, or more experts than a routing warp holds: the composed default.
  int64_t moe_experts(const Tensor& y, const Tensor& x, const Tensor& logits, const MoeExperts& ex,
                      const MoeScratch& s) override {
    bind();
    if (!moe_supported(y, x, logits, ex, s)) return Backend::moe_experts(y, x, logits, ex, s);
    const int64_t n = x.rows(), E = ex.n_expert, k = s.ids.cols();
    if (n == 0) return 0;
    if (moe_decode_fits(Ten(x), Ten(s.gate), k) && moe_aligned(ex)) {
      const MoeMats m = moe_mats(ex);  // may run the step so far eagerly (first use of a table)
      submit<&cuda::moe_route>(Ten(logits), Ten(s.ids), Ten(s.weights), int32_t(ex.norm_topk_prob));
      submit<&cuda::moe_decode>(Ten(y), Ten(x), Ten(s.ids), Ten(s.weights), m.gate, m.up, m.down,
                                Ten(s.gate), int32_t(ex.act));
      return std::min(E, n * k);  // the host does not see which experts ran
    }
    return moe_grouped(y, x, logits, ex, s);
  }

  // The grouped path gives every (token, slot) pair its own row.
  int64_t moe_scratch_rows(int64_t n_tokens, int64_t k) const override { return n_tokens * k; }

  void begin_step(int64_t n_tokens) override {
    bind();
    recs_.clear();
    blob_.clear();
    dedup_.clear();
    graph_cursor_ = 0;
    // Decode-sized steps (1 to kGraphTokens rows: one token, or a few being verified) are
    // recorded; each size keeps its own graph.
    recording_ = n_tokens >= 1 && n_tokens <= kGraphTokens && graphs_enabled_;
    slot_ = recording_ ? size_t(n_tokens) : 0;
    // The previous replay's first node may still be reading the pinned dyn values.
    if (recording_) HEARTH_CUDA_CHECK(cudaEventSynchronize(graph_done_));
  }

  void end_step() override {
    bind();
    if (recording_) finish_recording();
    if (out_.p) deliver_now();
    recording_ = false;
  }

  // Test hooks: graphs off (every step eager), sampling picks on the device too, and how many
  // graphs were captured / replayed.
  void set_graphs_enabled(bool on) { graphs_enabled_ = on; }
  bool set_device_sampling(bool on) { return std::exchange(device_sampling_, on); }
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t graphs_replayed() const { return graphs_replayed_; }

 private:
  // The calling thread's current device must be ours (the server may call from any thread).
  void bind() {
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
                            const MoeExperts& ex, const MoeScratch& s) {
    const int64_t n = x.rows(), H = x.cols(), E = ex.n_expert, k = std::min(ex.n_used, E);
    if (!moe_route_fits(E, k) || x.device != Device::CUDA || y.device != Device::CUDA ||
        y.rows() != n || y.cols() != H || logits.device != Device::CUDA ||
        logits.dtype != DType::F32 || logits.rows() != n || logits.cols() != E ||
        s.ids.cols() != k || s.ids.rows() != n || s.weights.numel() != n * k)
      return false;
    const int64_t I = ex.gate[0].rows();
    auto ok = [](const Tensor& w, int64_t rows, int64_t cols) {
      return w.device == Device::CUDA && w.dtype == DType::BF16 && w.ndim == 2 &&
             w.rows() == rows && w.cols() == cols;
    };
    for (int64_t e = 0; e < E; ++e)
      if (!ok(ex.gate[e], I, H) || !ok(ex.up[e], I, H) || !ok(ex.down[e], H, I)) return false;
    return true;
  }

  static bool moe_aligned(const MoeExperts& ex) {
    for (int64_t e = 0; e < ex.n_expert; ++e)
      if (!cuda::aligned16(ex.gate[e].data) || !cuda::aligned16(ex.up[e].data) ||
          !cuda::aligned16(ex.down[e].data))
        return false;
    return true;
  }

  struct MoeMats {
    MoeMat gate, up, down;
  };

  // Experts that are equally strided slices of one tensor (the fused and MLX layouts) are
  // addressed as base + e·stride; any other arrangement through a device pointer table.
  MoeMats moe_mats(const MoeExperts& ex) {
    MoeMats m;
    if (moe_strided(ex.gate, ex.n_expert, m.gate) && moe_strided(ex.up, ex.n_expert, m.up) &&
        moe_strided(ex.down, ex.n_expert, m.down))
      return m;
    const void* const* table = moe_table(ex);
    m = MoeMats{};
    m.gate.table = table;
    m.up.table = table + ex.n_expert;
    m.down.table = table + 2 * ex.n_expert;
    return m;
  }

  static bool moe_strided(const Tensor* mats, int64_t E, MoeMat& m) {
    const char* base = static_cast<const char*>(mats[0].data);
    const int64_t stride = E > 1 ? static_cast<const char*>(mats[1].data) - base : 0;
    for (int64_t e = 0; e < E; ++e)
      if (static_cast<const char*>(mats[e].data) != base + e * stride) return false;
    m.base = base;
    m.stride = stride;
    return true;
  }

  // The device table of a layer's 3·E matrix addresses (gate, up, down), kept per layer (keyed
  // by its first gate matrix) and rebuilt when the addresses change. Building it copies from
  // the host, so a recorded step runs eagerly up to here (once per layer).
  const void* const* moe_table(const MoeExperts& ex) {
    const int64_t E = ex.n_expert;
    std::vector<const void*> want(size_t(3 * E));
    for (int64_t e = 0; e < E; ++e) {
      want[size_t(e)] = ex.gate[e].data;
      want[size_t(E + e)] = ex.up[e].data;
      want[size_t(2 * E + e)] = ex.down[e].data;
    }
    MoeTable& t = moe_tables_[ex.gate[0].data];
    if (t.host != want) {
      t.dev = DeviceBuffer();
      t.dev = alloc(want.size() * sizeof(void*));
      t.host = std::move(want);
      copy_from_host(Tensor(t.dev.data(), DType::U64, {3 * E}, Device::CUDA), t.host.data());
    }
    return static_cast<const void* const*>(t.dev.data());
  }

  // The routing brought to the host (one sync per layer), the routed rows gathered in expert
  // order, per-expert products on row slices of the scratch (GEMV or cuBLASLt by rows), one GLU
  // over all rows, and a combine in slot order. Returns the number of active experts.
  int64_t moe_grouped(const Tensor& y, const Tensor& x, const Tensor& logits, const MoeExperts& ex,
                      const MoeScratch& s) {
    const int64_t n = x.rows(), E = ex.n_expert, k = s.ids.cols(), P = n * k;
    submit<&cuda::moe_route>(Ten(logits), Ten(s.ids), Ten(s.weights), int32_t(ex.norm_topk_prob));
    stop_recording();
    if (size_t(P) > moe_ids_host_n_) {
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      cudaFreeHost(moe_ids_host_);
      moe_ids_host_ = nullptr;
      moe_ids_host_n_ = 0;
      HEARTH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&moe_ids_host_),
                                      size_t(P) * sizeof(int32_t), cudaHostAllocDefault));
      moe_ids_host_n_ = size_t(P);
    }
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(moe_ids_host_, s.ids.data, size_t(P) * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, ctx_.stream));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    moe_rows_.group(moe_ids_host_, n, k, E);
    const int32_t* d_src = upload_ints(moe_rows_.src.data(), P, 7);
    const int32_t* d_pos = upload_ints(moe_rows_.pos.data(), P, 8);
    const Tensor xg = s.xg.slice_rows(0, P), g = s.gate.slice_rows(0, P), u = s.up.slice_rows(0, P),
                 o = s.out.slice_rows(0, P);
    submit<&cuda::gather_rows>(Ten(xg), Ten(x), d_src);
    moe_products(g, xg, ex.gate, 10);
    moe_products(u, xg, ex.up, 11);
    submit<&cuda::glu>(Ten(g), Ten(g), Ten(u), int32_t(ex.act));
    moe_products(o, g, ex.down, 12);
    submit<&cuda::moe_combine>(Ten(y), Ten(o), d_pos, Ten(s.weights));
    return moe_rows_.active;
  }

  // out's rows of each active expert = in's same rows · w[e]ᵀ (rows grouped by ExpertRows):
  // one grouped cuBLAS call for all experts (bf16 rows of ≥ 16-byte alignment), else one
  // product per expert. `tag` names the pointer upload (upload_ints) of this projection.
  void moe_products(const Tensor& out, const Tensor& in, const Tensor* w, int tag) {
    const int64_t E = int64_t(moe_rows_.offset.size()) - 1, O = out.cols(), K = in.cols();
    std::vector<const void*> ptrs;
    std::vector<int> rows;
    std::vector<int64_t> experts;
    for (int64_t e = 0; e < E; ++e)
      if (moe_rows_.offset[size_t(e + 1)] > moe_rows_.offset[size_t(e)]) experts.push_back(e);
    const bool grouped = out.dtype == DType::BF16 && in.dtype == DType::BF16 && O % 8 == 0 &&
                         K % 8 == 0 && !experts.empty();
    if (grouped) {
      const size_t c = experts.size();
      ptrs.resize(3 * c);
      rows.resize(c);
      for (size_t i = 0; i < c; ++i) {
        const int64_t e = experts[i], lo = moe_rows_.offset[size_t(e)],
                      hi = moe_rows_.offset[size_t(e + 1)];
        ptrs[i] = w[e].data;
        ptrs[c + i] = in.slice_rows(lo, hi).data;
        ptrs[2 * c + i] = out.slice_rows(lo, hi).data;
        rows[i] = int(hi - lo);
      }
      const auto* d_ptrs = reinterpret_cast<const void* const*>(
          upload_ints(ptrs.data(), int64_t(ptrs.size()) * int64_t(sizeof(void*) / 4), tag));
      if (cuda::linear_grouped(ctx_, d_ptrs, rows.data(), int(c), O, K)) return;
    }
    for (int64_t e : experts) {
      const int64_t lo = moe_rows_.offset[size_t(e)], hi = moe_rows_.offset[size_t(e + 1)];
      submit<&cuda::linear>(Ten(out.slice_rows(lo, hi)), Ten(in.slice_rows(lo, hi)), Ten(w[e]),
                            Ten());
    }
  }

  KvDev kv_dev(const KvView& kv) {
    KvDev d;
    d.k = Ten(kv.k);
    d.v = Ten(kv.v);
    d.capacity = kv.capacity;
    const int32_t first = int32_t(kv.first);
    d.first = upload_ints(&first, 1, 5);
    return d;
  }

  // Copies n 4-byte host values into the dyn area and returns their device address. Equal
  // contents of the same kind (tag) share a slot, so a step's positions upload once.
  const int32_t* upload_ints(const void* src, int64_t n, int tag) {
    if (n <= 0) return dyn_dev_;
    const size_t bytes = size_t(n) * 4;
    for (const auto& e : dedup_)
      if (e.tag == tag && e.n == n && std::memcmp(dyn_host_ + e.offset, src, bytes) == 0)
        return dyn_dev_ + e.offset;
    const int64_t len = (n + 3) / 4 * 4;  // 16-byte aligned slots
    int64_t at;
    if (recording_ && graph_cursor_ + len <= kGraphDynInts) {
      at = graph_cursor_;
      graph_cursor_ += len;
      std::memcpy(dyn_host_ + at, src, bytes);
    } else {
      if (recording_) stop_recording();  // a step with more inputs than the graph area holds
      if (len > kDynInts - kGraphDynInts)
        fail("CUDA backend: {} host values exceed the staging area", n);
      if (ring_ + len > kDynInts) {
        // Wrap: earlier copies out of the ring must have run before it is rewritten.
        HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
        ring_ = kGraphDynInts;
        dedup_.clear();
      }
      at = ring_;
      ring_ += len;
      std::memcpy(dyn_host_ + at, src, bytes);
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(dyn_dev_ + at, dyn_host_ + at, bytes,
                                        cudaMemcpyHostToDevice, ctx_.stream));
    }
    if (dedup_.size() >= 8) dedup_.erase(dedup_.begin());
    dedup_.push_back({tag, n, at});
    return dyn_dev_ + at;
  }

  // Ends the recorded step early: runs the records so far eagerly; the rest of the step is eager.
  void stop_recording() {
    if (!recording_) return;
    recording_ = false;
    dedup_.clear();  // graph-area slots are not ring slots
    if (!recs_.empty()) {
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(dyn_dev_, dyn_host_, size_t(graph_cursor_) * 4,
                                        cudaMemcpyHostToDevice, ctx_.stream));
      for (const Record& r : recs_) r.fn(ctx_, blob_.data() + r.offset);
      // The pinned graph area is rewritten by the next recorded step only after this.
      HEARTH_CUDA_CHECK(cudaEventRecord(graph_done_, ctx_.stream));
    }
    recs_.clear();
    blob_.clear();
  }

  void invalidate_graph() {
    for (GraphSlot& g : graphs_) {
      g.recs.clear();
      g.blob.clear();
    }
  }

  bool records_match() const {
    const GraphSlot& g = graphs_[slot_];
    if (!g.exec || g.recs.size() != recs_.size() || g.cursor != graph_cursor_ ||
        g.blob.size() != blob_.size())
      return false;
    for (size_t i = 0; i < recs_.size(); ++i)
      if (recs_[i].fn != g.recs[i].fn || recs_[i].size != g.recs[i].size) return false;
    return std::memcmp(blob_.data(), g.blob.data(), blob_.size()) == 0;
  }

  // End of a recorded step: replay the graph (or capture a new one), then deliver host outputs.
  void finish_recording() {
    recording_ = false;
    if (out_.p) submit_recorded_d2h();
    if (!recs_.empty()) {
      if (!records_match()) capture();
      HEARTH_CUDA_CHECK(cudaGraphLaunch(graphs_[slot_].exec, ctx_.stream));
      HEARTH_CUDA_CHECK(cudaEventRecord(graph_done_, ctx_.stream));
      ++graphs_replayed_;
    }
    recs_.clear();
    blob_.clear();
    dedup_.clear();
    if (out_.p) finish_delivery();
  }

  void submit_recorded_d2h() {
    Record r{&invoke<&launch_d2h, void*, const void*, size_t>, blob_.size(), 0};
    put(blob_, static_cast<void*>(out_host_));
    put(blob_, static_cast<const void*>(out_.p));
    put(blob_, out_bytes_);
    r.size = blob_.size() - r.offset;
    recs_.push_back(r);
    out_queued_ = true;
  }

  void capture() {
    HEARTH_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(dyn_dev_, dyn_host_, size_t(graph_cursor_) * 4,
                                        cudaMemcpyHostToDevice, ctx_.stream));
      for (const Record& r : recs_) r.fn(ctx_, blob_.data() + r.offset);
    } catch (...) {
      cudaStreamEndCapture(ctx_.stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    HEARTH_CUDA_CHECK(cudaStreamEndCapture(ctx_.stream, &graph));
    GraphSlot& slot = graphs_[slot_];
    bool updated = false;
    if (slot.exec) {
      cudaGraphExecUpdateResultInfo info{};
      updated = cudaGraphExecUpdate(slot.exec, graph, &info) == cudaSuccess;
      if (!updated) {
        cudaGetLastError();
        cudaGraphExecDestroy(slot.exec);
        slot.exec = nullptr;
      }
    }
    if (!updated) {
      const cudaError_t err = cudaGraphInstantiate(&slot.exec, graph, 0);
      cudaGraphDestroy(graph);
      HEARTH_CUDA_CHECK(err);
    } else {
      cudaGraphDestroy(graph);
    }
    slot.recs = recs_;
    slot.blob = blob_;
    slot.cursor = graph_cursor_;
    ++graphs_captured_;
  }

  // --- host outputs (logits) ---

  void linear_to_host(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
    // The model's host logits buffer holds f32 whatever the activation dtype says.
    const size_t bytes = size_t(y.numel()) * 4;
    if (out_.p) deliver_or_queue_output();
    if (bytes > out_dev_bytes_) {
      stop_recording();
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      cudaFree(out_dev_);
      out_dev_ = nullptr;
      grow_device(&out_dev_, out_dev_bytes_, bytes);
      invalidate_graph();
    }
    ensure_out_host(bytes);
    Ten d(y);
    d.p = out_dev_;
    d.dtype = kF32;
    submit<&cuda::linear>(d, Ten(x), Ten(w), Ten(bias));
    out_ = d;
    out_user_ = y.data;
    out_bytes_ = bytes;
    if (!recording_) deliver_now();  // outside a step: complete on return
  }

  const Ten* pending_host_output(const Tensor& x) const {
    return out_.p && out_user_ == x.data && size_t(x.numel()) * 4 == out_bytes_ ? &out_ : nullptr;
  }

  void deliver_or_queue_output() {
    if (recording_) stop_recording();
    deliver_now();
  }

  void deliver_now() {
    if (!out_.p) return;
    if (!out_queued_) launch_d2h(ctx_, out_host_, out_.p, out_bytes_);
    out_queued_ = true;
    finish_delivery();
  }

  void finish_delivery() {
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    std::memcpy(out_user_, out_host_, out_bytes_);
    out_ = Ten();
    out_user_ = nullptr;
    out_queued_ = false;
  }

  void ensure_out_host(size_t bytes) {
    if (bytes <= out_host_bytes_) return;
    stop_recording();
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    cudaFreeHost(out_host_);
    out_host_ = nullptr;
    HEARTH_CUDA_CHECK(cudaHostAlloc(&out_host_, bytes, cudaHostAllocDefault));
    out_host_bytes_ = bytes;
    invalidate_graph();
  }

  void grow_device(void** p, size_t& have, size_t need) {
    const size_t bytes = std::max(need, have * 2);
    const cudaError_t err = cudaMalloc(p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail("CUDA out of memory on cuda:{} allocating {:.1f} MiB of scratch", device_,
           double(bytes) / (1 << 20));
    }
    have = bytes;
  }

  // Host → device through two pinned buffers: the CPU fills one (threads, from the mapped file)
  // while the copy engine drains the other.
  void upload(void* dst, const void* src, size_t bytes) {
    if (bytes < (4u << 20)) {
      HEARTH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
      return;
    }
    if (staging_.empty()) {
      for (int i = 0; i < 2; ++i) {
        void* p = nullptr;
        HEARTH_CUDA_CHECK(cudaHostAlloc(&p, kUploadChunk, cudaHostAllocDefault));
        staging_.push_back(p);
        cudaEvent_t e;
        HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        staging_done_.push_back(e);
      }
    }
    ThreadPool& pool = ThreadPool::global();
    for (size_t off = 0, i = 0; off < bytes; off += kUploadChunk, ++i) {
      const size_t n = std::min(kUploadChunk, bytes - off);
      char* stage = static_cast<char*>(staging_[i % 2]);
      HEARTH_CUDA_CHECK(cudaEventSynchronize(staging_done_[i % 2]));
      const char* from = static_cast<const char*>(src) + off;
      const int64_t pieces = int64_t((n + (1u << 20) - 1) >> 20);
      pool.parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
        const size_t lo = size_t(b) << 20, hi = std::min(n, size_t(e) << 20);
        std::memcpy(stage + lo, from + lo, hi - lo);
      });
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, stage, n,
                                        cudaMemcpyHostToDevice, ctx_.stream));
      HEARTH_CUDA_CHECK(cudaEventRecord(staging_done_[i % 2], ctx_.stream));
    }
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }

  struct DedupEntry {
    int tag;
    int64_t n, offset;
  };

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

  bool graphs_enabled_ = true, recording_ = false, device_sampling_ = false;
  bool gemm_accumulate_ = true;
  std::vector<Record> recs_;
  std::vector<uint8_t> blob_;
  // One captured graph per step size 1..kGraphTokens, with the records it was captured from.
  struct GraphSlot {
    cudaGraphExec_t exec = nullptr;
    std::vector<Record> recs;
    std::vector<uint8_t> blob;
    int64_t cursor = 0;
  };
  static constexpr int64_t kGraphTokens = 8;
  // Slots: n (logits to the host), n + kGraphTokens (greedy pick), n + 2·kGraphTokens (sampled).
  std::array<GraphSlot, 3 * kGraphTokens + 1> graphs_;
  size_t slot_ = 0;
  cudaEvent_t graph_done_ = nullptr;
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

  // MoE: per-layer expert address tables, the grouped path's host copy of the routing (pinned)
  // and its rows grouped by expert.
  struct MoeTable {
    std::vector<const void*> host;
    DeviceBuffer dev;
  };
  std::map<const void*, MoeTable> moe_tables_;
  int32_t* moe_ids_host_ = nullptr;
  size_t moe_ids_host_n_ = 0;
  ExpertRows moe_rows_;
};

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

// Test-only access to graph statistics and the graph switch (declared in the CUDA tests).
void cuda_backend_set_graphs(Backend& b, bool on) {
  if (auto* c = dynamic_cast<cuda::CudaBackend*>(&b)) c->set_graphs_enabled(on);
}
bool cuda_backend_set_device_sampling(Backend& b, bool on) {
  if (auto* c = dynamic_cast<cuda::CudaBackend*>(&b)) return c->set_device_sampling(on);
  return false;
}
int64_t cuda_backend_graphs_replayed(const Backend& b) {
  auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  return c ? c->graphs_replayed() : 0;
}
int64_t cuda_backend_graphs_captured(const Backend& b) {
  auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  return c ? c->graphs_captured() : 0;
}

}  // namespace hearth
