// Shared by the CUDA backend (host C++) and its kernels (.cu): the plain-data tensor descriptor
// the launchers take, the per-backend launch context, the CUDA error check, and the launcher
// declarations (one .cu per op family). Launchers only enqueue work on ctx.stream: they never
// synchronise or allocate, so every one of them can be captured into a CUDA graph.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"

namespace hearth::cuda {

[[noreturn]] void cuda_fail(const char* call, const char* error, const char* file, int line);

// Every CUDA runtime / cuBLASLt call goes through this: failures become hearth::Error naming
// the call and the error string.
#define HEARTH_CUDA_CHECK(call)                                                              \
  do {                                                                                       \
    cudaError_t hearth_err_ = (call);                                                        \
    if (hearth_err_ != cudaSuccess)                                                          \
      ::hearth::cuda::cuda_fail(#call, cudaGetErrorString(hearth_err_), __FILE__, __LINE__); \
  } while (0)
#define HEARTH_CUBLAS_CHECK(call)                                                                \
  do {                                                                                           \
    cublasStatus_t hearth_st_ = (call);                                                          \
    if (hearth_st_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::hearth::cuda::cuda_fail(#call, cublasLtGetStatusString(hearth_st_), __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: catches bad launch configurations without synchronising.
#define HEARTH_CUDA_LAUNCHED() HEARTH_CUDA_CHECK(cudaGetLastError())

// dtype codes as in hearth::DType (F32 = 0, F16 = 1, BF16 = 2); kernels read these three.
enum : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Whether p allows 16-byte vector accesses (the kernels' fast paths).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// A tensor as plain data without padding, so op records can be compared bytewise.
struct Ten {
  void* p = nullptr;
  int64_t d[4] = {0, 0, 0, 0};
  int32_t dtype = 0;
  int32_t ndim = 0;

  Ten() = default;
  explicit Ten(const Tensor& t) : p(t.data), dtype(int32_t(t.dtype)), ndim(t.ndim) {
    for (int i = 0; i < 4; ++i) d[i] = i < t.ndim ? t.shape[size_t(i)] : 0;
  }
  bool empty() const { return p == nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= d[i];
    return n;
  }
  int64_t cols() const { return ndim == 0 ? 1 : d[ndim - 1]; }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }
};

// A packed weight (Tensor::packed) as plain data, for the launchers: the logical matrix is W
// [out, in]. Affine: codes [out, in·bits/32], scales and biases [out, in/group] of param_dt.
// Trellis (k = bits): axis 1, codes [out, in·k/32] and f16 scales [out]; axis 0 (stored
// transposed), codes [in, out·k/32] and f16 scales [in].
enum : int32_t { kPackedAffine = 1, kPackedTrellis = 2 };
struct PackedTen {
  const uint32_t* codes = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t out = 0, in = 0;
  int32_t format = 0, bits = 0, axis = 1, group = 0, param_dt = 0, pad = 0;

  PackedTen() = default;
  explicit PackedTen(const Tensor& w)
      : codes(static_cast<const uint32_t*>(w.data)),
        scales(w.packed.scales),
        biases(w.packed.biases),
        out(w.ndim == 2 ? w.shape[0] : 0),
        in(w.ndim == 2 ? w.shape[1] : 0),
        format(w.packed.format == WeightFormat::Affine ? kPackedAffine : kPackedTrellis),
        bits(w.packed.bits),
        axis(w.packed.axis),
        group(w.packed.group_size),
        param_dt(int32_t(w.packed.param_dtype)) {}
  // Rows of W decoded per stored row: the trellis axis 0 layout is Wᵀ.
  bool transposed() const { return format == kPackedTrellis && axis == 0; }
};

// KV caches are paged (kv/kv_cache.h): position p of a layer lies in block p / kKvBlock of its
// sequence's block table, at row p % kKvBlock of the layer's keys (k_off elements from the
// block's start) or values (v_off). Rows are n_head_kv · head_dim bf16, back to back.
constexpr int kKvBlockShift = 6;
constexpr int64_t kKvBlock = int64_t(1) << kKvBlockShift;
static_assert(kKvBlock == 64, "the CUDA kernels assume KvCache::kBlockPositions");

// One sequence's cache for a layer, its table and first position in device memory (graph
// replays read the new values at the same addresses).
struct KvDev {
  void* const* blocks = nullptr;  // device: the block table (entries below first's may be null)
  int64_t k_off = 0, v_off = 0;   // elements
  // Positions the table covers: the sequence's end rounded up to a power of two (at least
  // 256). Grids sized by it (the split-K) change only when it doubles, so a captured decode
  // graph stays valid while the sequence grows.
  int64_t span = 0;
  const int32_t* first = nullptr;  // device int32
};

// One sequence's cache in a step of several (the _rows ops): row r of the step reads its keys
// and values through table[r] (the layer's k_off and v_off are the same for every row). 16
// bytes, uploaded through the dyn area as 4 ints.
struct SeqKv {
  void* const* blocks;
  int32_t first;
  int32_t unused;
};
static_assert(sizeof(SeqKv) == 16, "SeqKv is uploaded as 4 ints");

struct Ctx {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // grouped products (cuBLASLt has no grouped GEMM)
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  int sm_count = 0;
  // Programmatic dependent launch for the decode kernels (sm_90+, and CudaOptions::pdl).
  bool pdl = false;
  // Split-K attention: arrival counters, then partials (sized by attention_workspace_bytes
  // before any launch; zeroed when allocated, and every launch leaves the counters at zero).
  float* attn_ws = nullptr;
  size_t attn_ws_bytes = 0;
  // bf16 products of at most this many rows take the GEMV (linear, linear_many, ...); more go
  // to cuBLASLt. 8 in a step of one sequence; steps of several set it lower (gemv_max_rows).
  int gemv_max_rows = 8;
  // Keys per split-K piece of attention_rows: 0 sizes the pieces by the grid (the rows, heads and
  // SMs of the call); > 0 fixes them (--deterministic: a row's pieces, counted back from its
  // newest key, then depend on that row alone).
  int attention_split_keys = 0;
  // --deterministic: products never take cuBLASLt (linear_fixed, or linear's tiled kernel where
  // that does not fit: both sum each output over k in one order at any row count).
  bool fixed_order = false;
};

// --- launchers (ctx first, then the op's operands; device pointers only) ---

// linear.cu
void linear(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, const Ten& bias);
// Makes linear's cuBLASLt plan for these operands now (host work), so that a launch inside a
// graph capture only looks it up.
void linear_prepare(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w);
void linear_plans_clear();
// The batch-invariant product (linear_fixed.cu): y[n, out] (rows ldy apart) = x · w[out, in]ᵀ
// (+ bias), or y += (x · wᵀ + bias) · scale when `accumulate`; each output summed over k in one
// order whatever n is. Fits bf16 x of 16-byte aligned rows of a multiple of 8 and bf16 or f32 y.
// w_transposed: w is stored as Wᵀ [in, out] (out a multiple of 8), with the same sums.
bool linear_fixed_fits(const Ten& y, const Ten& x, const Ten& w);
// Raises its kernels' shared-memory limits once (outside any graph capture).
void linear_fixed_init();
void linear_fixed(Ctx& ctx, const Ten& y, int64_t ldy, const Ten& x, const void* w, int64_t out,
                  const Ten& bias, float scale, bool accumulate, bool w_transposed = false);
// Whether linear_accumulate takes these operands (more rows than the GEMV's, bf16, a cuBLASLt plan:
// made now, so the launch may be captured); otherwise the caller composes the product and the add.
bool linear_accumulate_fits(Ctx& ctx, const Ten& x, const Ten& in, const Ten& w);
// x += (in · wᵀ) * scale through the GEMM's own accumulate (beta = 1).
void linear_accumulate(Ctx& ctx, const Ten& x, const Ten& in, const Ten& w, float scale);
// One grouped cuBLAS call for `count` products Y_g[rows[g], out] = X_g[rows[g], in] · W_gᵀ,
// bf16 in and out, f32 accumulation. ptrs: a device array of 3·count addresses, W_0.. then
// X_0.. then Y_0..; rows: host. False when cuBLAS does not take it (the caller loops instead).
bool linear_grouped(Ctx& ctx, const void* const* ptrs, const int* rows, int count, int64_t out,
                    int64_t in);
// gemv.cu: decode products (≤ 8 bf16 input rows, 16-byte aligned; gemv_fits says so) with bf16
// weights or packed ones decoded in registers (MLX affine; trellis coded along the rows).
struct GemvWeight {
  const void* w = nullptr;  // bf16 rows [out, in], or the codes
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t out = 0, in = 0;
  int32_t format = 0;  // 0: bf16; kPackedAffine, kPackedTrellis
  int32_t bits = 16, group = 0, param_dt = 0;

  GemvWeight() = default;
  explicit GemvWeight(const Ten& t) : w(t.p), out(t.d[0]), in(t.d[1]) {}
  explicit GemvWeight(const PackedTen& p)
      : w(p.codes),
        scales(p.scales),
        biases(p.biases),
        out(p.out),
        in(p.in),
        format(p.format),
        bits(p.bits),
        group(p.group),
        param_dt(p.param_dt) {}
  // Whether one launch can read both (its kernel is instantiated for one format).
  bool same_format(const GemvWeight& o) const {
    return format == o.format && bits == o.bits && group == o.group && param_dt == o.param_dt;
  }
};
constexpr int kGemvMaxSegs = 4;
struct GemvJobs {  // up to kGemvMaxSegs products of the same input and format, in one launch
  Ten y[kGemvMaxSegs], bias[kGemvMaxSegs];
  GemvWeight w[kGemvMaxSegs];
  int32_t n = 0, pad = 0;
};
// The GEMV's work split, shared with moe.cu's expert products (blocks of 8 warps): warps per
// row for `rows` rows of `units` units (16-byte words of bf16), and the blocks of `kernel`
// resident per SM with `smem` bytes of dynamic shared memory (measured once per pair; allowed
// during graph capture).
int gemv_split(const Ctx& ctx, int64_t rows, int64_t units);
int gemv_resident_blocks(const void* kernel, size_t smem);
// Allows the input-norm variants their shared memory (once, outside any graph capture).
void gemv_init();
bool gemv_fits(const Ten& x, const Ten& w);        // a bf16 weight
bool gemv_fits(const Ten& x, const PackedTen& w);  // a packed one
// The input RMSNorm a GEMV can apply itself: rms_norm(x) * (w + offset) per row.
struct GemvNorm {
  Ten w;
  float eps = 0.0f, offset = 0.0f;
};
bool gemv_norm_fits(const Ten& x, const Ten& norm_w);  // also needs gemv_fits
// jobs' outputs from x (normalised first unless norm.w is empty).
void gemv_many(Ctx& ctx, const Ten& x, const GemvJobs& jobs, const GemvNorm& norm);
// y = x·wᵀ + bias: one product, no norm.
void gemv_one(Ctx& ctx, const Ten& y, const Ten& x, const GemvWeight& w, const Ten& bias);
// resid += rounded(x·wᵀ + bias to product_dtype) * scale: the product that ends a residual block.
void gemv_residual(Ctx& ctx, const Ten& resid, float scale, const Ten& x, const GemvWeight& w,
                   const Ten& bias, int32_t product_dtype);
// y = act(x·gateᵀ + gate_bias) * (x·upᵀ + up_bias), x normalised first unless norm.w is empty.
void gemv_glu(Ctx& ctx, const Ten& y, const Ten& x, const GemvWeight& gate, const Ten& gate_bias,
              const GemvWeight& up, const Ten& up_bias, int32_t act, const GemvNorm& norm);
// packed_gemv.cu: decode products (n ≤ 8 bf16 input rows) with a trellis weight stored
// transposed (axis 0), decoding the codes in registers; the other packed weights take the GEMV.
// Sums per-slice partials: `partials` must hold packed_partials_bytes(ctx, w) (zero for the
// weights it does not take). With `resid` set, resid += rounded(y to product_dtype) * scale
// instead of storing y (the product that ends a residual block).
bool packed_gemv_fits(const Ten& x, const PackedTen& w);
size_t packed_partials_bytes(const Ctx& ctx, const PackedTen& w);
void packed_gemv(Ctx& ctx, const Ten& y, const Ten& x, const PackedTen& w, const Ten& bias,
                 float* partials, const Ten& resid, float scale);
// packed_dequant.cu: W's rows [r0, r1) as bf16 [r1 - r0, in] into dst; for a transposed trellis
// weight, stored rows [r0, r1) of Wᵀ ([r1 - r0, out]). Values as the format's reference decoder
// gives them, rounded to bf16 (the prefill GEMM's input).
void packed_dequantize(Ctx& ctx, void* dst, const PackedTen& w, int64_t r0, int64_t r1);
// y[t] = row ids[t] of a packed table [vocab, H] · scale.
void packed_embedding(Ctx& ctx, const Ten& y, const PackedTen& table, const int32_t* ids,
                      float scale);
// linear.cu: y[:, col0 : col0 + rows] = x · Wᵀ for a bf16 W [rows, in] (or, transposed, its
// Wᵀ [in, rows]) in device memory, y [n, y.cols()]; the prefill GEMM of packed weights.
void linear_rows(Ctx& ctx, const Ten& y, const Ten& x, const void* w, int64_t rows, int64_t col0,
                 bool transposed);
void add_bias(Ctx& ctx, const Ten& y, const Ten& bias);  // y[n, out] += bias[out]
// elementwise.cu
void embedding(Ctx& ctx, const Ten& y, const Ten& table, const int32_t* ids, float scale);
void glu(Ctx& ctx, const Ten& y, const Ten& gate, const Ten& up, int32_t act);
// y[rows, f] = act(all[:, :f]) * all[:, f:] for bf16 all [rows, 2f]: the GLU of a stacked
// gate|up product.
void glu_halves(Ctx& ctx, const Ten& y, const Ten& all, int32_t act);
// A stacked product's columns to their tensors: y[i] ([rows, cols[i]], all's dtype) gets the
// next cols[i] columns of all [rows, Σ cols] (bf16 or f32), plus bias[i] when it is set.
struct ColumnParts {
  void* y[kGemvMaxSegs] = {};
  const void* bias[kGemvMaxSegs] = {};
  int64_t cols[kGemvMaxSegs] = {};
  int32_t bias_dtype[kGemvMaxSegs] = {};
  int32_t n = 0, pad = 0;
};
void split_columns(Ctx& ctx, const Ten& all, const ColumnParts& parts);
void add(Ctx& ctx, const Ten& y, const Ten& a, const Ten& b, float b_scale);
void scale(Ctx& ctx, const Ten& x, float s);
void softcap(Ctx& ctx, const Ten& x, float cap);
void fill(Ctx& ctx, const Ten& y, float value);
void convert(Ctx& ctx, const Ten& dst, const Ten& src);  // any float dtype to any, same numel
void mul_sigmoid(Ctx& ctx, const Ten& y, const Ten& x, const Ten& gate);
void gather_rows(Ctx& ctx, const Ten& y, const Ten& x, const int32_t* rows);
void scatter_add_rows(Ctx& ctx, const Ten& y, const Ten& x, const int32_t* rows,
                      const float* weights);
void copy_bytes(Ctx& ctx, const Ten& dst, const Ten& src);
// norm.cu
void rms_norm(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, float eps, float offset);
void rms_norm_gated(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, const Ten& z, float eps);
// rope.cu
void rope(Ctx& ctx, const Ten& x, const int32_t* positions, const float* inv_freq,
          int32_t rotary_dim, float attention_factor);
void kv_store(Ctx& ctx, const KvDev& kv, const Ten& k, const Ten& v, const int32_t* positions);
// Per-head q/k RMSNorm (skipped for empty gains), rope (rotary_dim 0: none), k and v into the
// cache; one warp per head. Needs head_dim % 32 == 0, ≤ 256, and (rotary_dim/2) % 32 == 0 so a
// rotate_half pair lives in one lane (qk_rope_store_fits).
bool qk_rope_store_fits(int64_t head_dim, int32_t rotary_dim);
void qk_norm_rope_store(Ctx& ctx, const Ten& q, const Ten& k, const Ten& v, const Ten& q_norm,
                        const Ten& k_norm, float eps, float offset, const KvDev& kv,
                        const int32_t* positions, const float* inv_freq, int32_t rotary_dim,
                        float attention_factor);
// The same with row t's cache from seqs[t] (k_off and v_off those of kv, the rest unused), as
// qk_norm_rope_store_rows.
void qk_norm_rope_store_rows(Ctx& ctx, const Ten& q, const Ten& k, const Ten& v, const Ten& q_norm,
                             const Ten& k_norm, float eps, float offset, const KvDev& kv,
                             const SeqKv* seqs, const int32_t* positions, const float* inv_freq,
                             int32_t rotary_dim, float attention_factor);
// attention.cu. The workspace (ctx.attn_ws) must hold this many bytes, zeroed once when allocated.
// span: the KvDev's (rows_apart: the largest of the rows'); rows_apart: every row is its own
// sequence (attention_rows).
size_t attention_workspace_bytes(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p,
                                 int64_t span, bool rows_apart = false);
// Decode attention of n sequences, one row each: row t over the cache seqs[t], with kv's k_off
// and v_off; kv.span is the largest of the rows' spans (it sizes the split-K).
// The most rows one attention_rows call takes with fixed split lengths (its split groups, rows
// × KV heads × head chunks, each need an arrival counter of the workspace; at most 128).
int64_t attention_rows_per_call(const AttentionParams& p);
void attention_rows(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const SeqKv* seqs,
                    const int32_t* positions, const AttentionParams& p);
// Raises the dynamic shared-memory limits once (outside any graph capture).
void attention_init();
void attention(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const int32_t* positions,
               const AttentionParams& p);
// sampling.cu: Backend::pick_token on the device. The settings and the draw live in device
// memory (the dyn area), so one captured decode graph serves every request.
struct PickDyn {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double u;
};
// Allocates and zeroes the picker's scratch for ctx's stream (once, outside any graph capture;
// the kernels leave it zeroed again after every pick, so graph replays need no memset).
void pick_token_init(const Ctx& ctx);
// greedy_only: the caller knows the pick is greedy, so only the argmax kernel is launched.
void pick_token(Ctx& ctx, int32_t* out, const Ten& logits, const PickDyn* dyn, bool greedy_only);
// pick_token on each row of logits [rows, n] (contiguous), with row r's settings dyn[r], into
// out[r]: every kernel of the chain serves all rows at once. greedy_only: every row is greedy.
// scratch: pick_rows_scratch(ctx, rows or more), taken outside any graph capture.
void pick_tokens(Ctx& ctx, int32_t* out, const Ten& logits, const PickDyn* dyn, bool greedy_only,
                 void* scratch);
// The scratch of `rows` rows of pick_tokens for ctx's stream, zeroed; grown (after a stream
// synchronisation: picks in flight may read the old one) when it holds fewer rows.
void* pick_rows_scratch(const Ctx& ctx, int64_t rows);
// gated_delta.cu
void gated_delta_init();
void conv1d_causal_silu(Ctx& ctx, const Ten& y, const Ten& x, const Ten& state, const Ten& w);
void gated_delta_gates(Ctx& ctx, const Ten& g, const Ten& beta, const Ten& a, const Ten& b,
                       const Ten& a_log, const Ten& dt_bias);
void gated_delta(Ctx& ctx, const Ten& out, const Ten& qkv, const Ten& g, const Ten& beta,
                 const Ten& state, const GatedDeltaParams& p);
// gated_delta_mixer.cu: Backend::gated_delta_mixer for one token in one kernel (sm_90: it
// needs thread-block clusters). The scratch tensors are not written; their dtypes say where the
// composed ops would have rounded.
// Rows mode (n_rows > 0): one token of each of n_rows sequences; qkv, a, b, z and normed have
// n_rows rows, and row r's recurrent and conv states are states[2r] and states[2r + 1] (a device
// table; state and conv_state then give only the shapes of one).
struct GdnMixerArgs {
  Ten normed, qkv, conv_state, conv_w, a, b, a_log, dt_bias, state, norm_w, z;
  int32_t hk = 0, hv = 0, dk = 0, dv = 0;
  int32_t conv_dt = 0, g_dt = 0, beta_dt = 0, core_dt = 0;
  float eps = 0.0f;
  int32_t n_rows = 0;
  void* const* states = nullptr;
};
// Allows the kernel clusters of up to 16 blocks and measures the device's limit (once, sm_90+).
void gated_delta_mixer_init();
// The shapes the kernel takes: one token (a row per sequence in rows mode), Hv a multiple of Hk,
// Dk ≤ 256, Dv a multiple of 4 up to 256, (Hv/Hk) · ceil(Dv/32) ≤ the cluster limit, 2-4 conv
// taps, f32 state, 16-byte aligned (in rows mode the caller checks the table's states).
bool gated_delta_mixer_fits(const GdnMixerArgs& a);
void gated_delta_mixer(Ctx& ctx, const GdnMixerArgs& a);

// trellis_viterbi.cu: the quantizer's Viterbi search (quant/trellis_coder.h) for n blocks of
// 256 weights x [n, 256] f32 (divided by their row scales) into words [n, 8k], k = 2, 3 or 4.
// Not a model op: it takes a bare stream, and its kernel allocates no memory.
void launch_trellis_viterbi(const float* x, int64_t n, int k, uint32_t* words, cudaStream_t stream);

}  // namespace hearth::cuda
