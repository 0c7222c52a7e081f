// Backend::decode_layers on the GPU: which one-token steps the persistent decode kernel
// (decode_step.cu) takes, and its arguments (the layer table, the scratch, the position and
// the rotation). docs/cuda.md, "One kernel per decode step".
#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"

namespace hearth {

namespace cuda {

namespace {

bool is_matrix(const Tensor& w, int64_t rows, int64_t cols) {
  return w.device == Device::CUDA && w.dtype == DType::BF16 && w.ndim == 2 && w.shape[0] == rows &&
         w.shape[1] == cols && aligned16(w.data);
}
bool is_gain(const Tensor& g, int64_t n, DType dt) {
  return g.device == Device::CUDA && g.dtype == dt && g.numel() == n;
}
bool is_f32(const Tensor& t, int64_t n) {
  return t.device == Device::CUDA && t.dtype == DType::F32 && t.numel() == n && aligned16(t.data);
}
bool is_linear(const Backend::DecodeLayer& L) { return !L.in_qkv.empty(); }

size_t layer_bytes(const Backend::DecodeLayer& L) {
  size_t n = 0;
  for (const Tensor* t : {&L.q, &L.k, &L.v, &L.out_gate, &L.o, &L.gate, &L.up, &L.down, &L.in_qkv,
                          &L.in_z, &L.in_b, &L.in_a})
    n += t->empty() ? 0 : t->nbytes();
  return n;
}

// The addresses of attention layer L into d, or false where the kernel does not take it.
bool attention_layer(const Backend::DecodeLayer& L, const StepArgs& a, const KvView& kv0,
                     StepLayerDev& d) {
  const int64_t H = a.H, nq = int64_t(a.nh) * a.hd, nk = int64_t(a.nkv) * a.hd;
  const DType gdt = DType(a.gain_dt);
  const bool qk = !L.q_norm.empty();
  if (!is_matrix(L.q, nq, H) || !is_matrix(L.k, nk, H) || !is_matrix(L.v, nk, H) ||
      !is_matrix(L.o, H, nq) || L.out_gate.empty() == bool(a.gated) ||
      (a.gated && !is_matrix(L.out_gate, nq, H)) || qk == L.k_norm.empty() ||
      (qk && (!is_gain(L.q_norm, a.hd, gdt) || !is_gain(L.k_norm, a.hd, gdt))) ||
      L.kv.blocks != kv0.blocks || L.kv.first != kv0.first || L.kv.end != kv0.end ||
      L.kv.row_bytes != nk * 2 || L.kv.k_offset % 16 != 0 || L.kv.v_offset % 16 != 0)
    return false;
  d.q = static_cast<const uint4*>(L.q.data);
  d.k = static_cast<const uint4*>(L.k.data);
  d.v = static_cast<const uint4*>(L.v.data);
  d.out_gate = a.gated ? static_cast<const uint4*>(L.out_gate.data) : nullptr;
  d.q_norm = qk ? L.q_norm.data : nullptr;
  d.k_norm = qk ? L.k_norm.data : nullptr;
  d.k_off = L.kv.k_offset / 2;  // bf16 elements
  d.v_off = L.kv.v_offset / 2;
  return true;
}

// The addresses of Gated DeltaNet layer L into d, or false where the kernel does not take it.
bool gdn_layer(const Backend::DecodeLayer& L, const StepArgs& a, StepLayerDev& d) {
  const int64_t H = a.H, C = a.conv_c, K = a.conv_k, hv = a.hv, VD = int64_t(a.hv) * a.dv;
  if (!is_matrix(L.in_qkv, C, H) || !is_matrix(L.in_z, VD, H) || !is_matrix(L.in_b, hv, H) ||
      !is_matrix(L.in_a, hv, H) || !is_matrix(L.o, H, VD) || L.conv_w.ndim != 2 ||
      L.conv_w.shape[0] != K || !is_f32(L.conv_w, K * C) || !is_f32(L.a_log, hv) ||
      !is_f32(L.dt_bias, hv) || !is_gain(L.lin_norm, a.dv, DType(a.lin_gain_dt)) ||
      !is_f32(L.conv_state, (K - 1) * C) || !is_f32(L.state, VD * a.dk))
    return false;
  d.in_qkv = static_cast<const uint4*>(L.in_qkv.data);
  d.in_z = static_cast<const uint4*>(L.in_z.data);
  d.in_b = static_cast<const uint4*>(L.in_b.data);
  d.in_a = static_cast<const uint4*>(L.in_a.data);
  d.conv_w = static_cast<const float*>(L.conv_w.data);
  d.a_log = static_cast<const float*>(L.a_log.data);
  d.dt_bias = static_cast<const float*>(L.dt_bias.data);
  d.lin_norm = L.lin_norm.data;
  d.conv_state = static_cast<float*>(L.conv_state.data);
  d.state = static_cast<float*>(L.state.data);
  d.linear = 1;
  return true;
}

}  // namespace

std::atomic<int64_t> g_decode_layers_taken{0};
std::atomic<int64_t> g_decode_xattn_taken{0};

bool CudaBackend::decode_layers(const DecodeLayers& step) {
  using Mode = CudaOptions::DecodeStep;
  // Deterministic: the per-op path, whose products are linear_fixed's at every row count.
  if (options_.decode_step == Mode::Never || options_.deterministic || step.n_layers < 1 ||
      !step.layers)
    return false;
  bind();
  const int64_t H = step.x.numel(), nh = step.n_head, nkv = step.n_head_kv, hd = step.head_dim;
  const DecodeLayer& L0 = step.layers[0];
  // By default only layers whose weights take long enough to stream that the kernel's fixed
  // costs (five grid barriers and attention's slowest head per layer) are a small share: it is
  // ahead of the per-op graph on every shape measured, down to the 0.6B's 31 MB layers (1,109–
  // 1,117 against 1,035–1,038 t/s at tg128; docs/cuda.md). Smaller layers are not measured.
  constexpr size_t kAutoMinLayerBytes = size_t(24) << 20;
  if (options_.decode_step == Mode::Auto && layer_bytes(L0) < kAutoMinLayerBytes) return false;
  const int64_t I = L0.gate.ndim == 2 ? L0.gate.shape[0] : 0;
  const DType gdt = L0.attn_norm.dtype;
  // The attention layers' caches share one block table and first position (the first one's); a
  // stack of Gated DeltaNet layers only has none, and attends to nothing. The first Gated DeltaNet
  // layer (lin) gives the conv's taps and the gated norm's gain dtype.
  const DecodeLayer* first_attn = nullptr;
  const DecodeLayer* lin = nullptr;
  bool hybrid = false;
  for (int il = 0; il < step.n_layers; ++il) {
    const DecodeLayer& L = step.layers[il];
    hybrid = hybrid || is_linear(L) || !L.out_gate.empty();
    if (!first_attn && !is_linear(L)) first_attn = &L;
    if (!lin && is_linear(L)) lin = &L;
  }
  KvView kv0;
  kv0.first = step.position;
  if (first_attn) kv0 = first_attn->kv;
  if (first_attn && (!kv0.paged() || kv0.block_size != kKvBlock)) return false;
  // Its attention gives each (query head, chunk of keys) a warp, at most kStepMaxChunks chunks:
  // up to kMaxKeys (512) a warp reads one 32-key block. Longer contexts (a warp walking several
  // blocks in turn) are not measured yet, so they take the per-op path, whose attention splits
  // the keys over the whole GPU.
  constexpr int64_t kMaxKeys = int64_t(kStepMaxChunks) * 32;
  if (step.position - kv0.first + 1 > kMaxKeys) return false;
  if (step.x.device != Device::CUDA || step.x.dtype != DType::BF16 || !aligned16(step.x.data) ||
      (gdt != DType::BF16 && gdt != DType::F32) || step.rope.rotary_dim < 0 ||
      (step.rope.rotary_dim > 0 && !step.rope.inv_freq))
    return false;
  const GatedDeltaParams& g = step.gdn;
  const int64_t VD = int64_t(g.n_v_heads) * g.v_dim;
  StepArgs a;
  std::memset(static_cast<void*>(&a), 0, sizeof a);  // records compare bytewise
  a.n_layers = step.n_layers;
  a.H = int32_t(H);
  a.I = int32_t(I);
  a.nh = int32_t(nh);
  a.nkv = int32_t(nkv);
  a.hd = int32_t(hd);
  a.vec8 = int32_t(std::max({H, I, nh * hd, VD}) / 8);
  a.gain_dt = int32_t(gdt);
  a.act = int32_t(step.act);
  a.stage = options_.decode_stage ? 1 : 0;
  a.stage2 = options_.decode_stage2 ? 1 : 0;
  a.kv_prefetch = options_.decode_kv_prefetch ? 1 : 0;
  a.blocks = decode_blocks_;
  a.rot_half = step.rope.rotary_dim / 2;
  a.xattn = options_.decode_xattn && (hd == 256 || hd == 128) ? 1 : 0;
  a.hybrid = hybrid ? 1 : 0;
  a.gated = first_attn && !first_attn->out_gate.empty() ? 1 : 0;
  // Gated DeltaNet shapes, where the stack has such layers (hv 0: none).
  if (lin) {
    a.hk = g.n_k_heads;
    a.hv = g.n_v_heads;
    a.dk = g.k_dim;
    a.dv = g.v_dim;
    a.conv_c = int32_t(2 * int64_t(g.n_k_heads) * g.k_dim + VD);
    a.conv_k = int32_t(lin->conv_w.ndim == 2 ? lin->conv_w.shape[0] : 0);
    a.lin_gain_dt = int32_t(lin->lin_norm.dtype);
  }
  a.eps = step.eps;
  a.offset = step.norm_offset;
  a.scale = step.attn_scale;
  a.rope_factor = step.rope.attention_factor;
  if (!decode_step_fits(a)) return false;
  std::vector<StepLayerDev> table(size_t(step.n_layers));
  for (int il = 0; il < step.n_layers; ++il) {
    const DecodeLayer& L = step.layers[il];
    StepLayerDev& d = table[size_t(il)];
    if (!is_matrix(L.gate, I, H) || !is_matrix(L.up, I, H) || !is_matrix(L.down, H, I) ||
        !is_gain(L.attn_norm, H, gdt) || !is_gain(L.ffn_norm, H, gdt) ||
        !(is_linear(L) ? gdn_layer(L, a, d) : attention_layer(L, a, kv0, d)))
      return false;
    d.o = static_cast<const uint4*>(L.o.data);
    d.gate = static_cast<const uint4*>(L.gate.data);
    d.up = static_cast<const uint4*>(L.up.data);
    d.down = static_cast<const uint4*>(L.down.data);
    d.attn_norm = L.attn_norm.data;
    d.ffn_norm = L.ffn_norm.data;
  }
  // The layer table: uploaded when it changes (a copy from the host, so this step runs eagerly).
  const size_t table_bytes = table.size() * sizeof(StepLayerDev);
  if (table.size() != step_layers_host_.size() ||
      std::memcmp(table.data(), step_layers_host_.data(), table_bytes) != 0) {
    if (step_layers_dev_.size() < table_bytes) step_layers_dev_ = alloc(table_bytes);
    copy_from_host(Tensor(step_layers_dev_.data(), DType::U8, {int64_t(table_bytes)}, Device::CUDA),
                   table.data());
    step_layers_host_ = std::move(table);
  }
  // Scratch: q, k, v, output gate, mixer output, hidden (bf16); the Gated DeltaNet products
  // (f32); the barrier's count. Each part 16-byte aligned.
  auto round16 = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t n_q = size_t(nh * hd), n_k = size_t(nkv * hd), n_h = size_t(I);
  const size_t n_mix = std::max(n_q, size_t(a.hv) * size_t(a.dv));
  const size_t n_lin = lin ? size_t(a.conv_c) + size_t(VD) + 2 * size_t(a.hv) : 0;
  const size_t lin_at = round16((2 * n_q + 2 * n_k + n_mix + n_h) * 2);
  const size_t xpart_at = lin_at + round16(n_lin * 4);
  const size_t count_at = xpart_at + round16(size_t(nh) * kStepMaxChunks * size_t(hd + 2) * 4);
  const size_t barrier_at = count_at + round16(size_t(nh) * 4);
  const size_t need = barrier_at + 16;
  if (need > step_ws_bytes_) {
    regrow_device(&step_ws_, step_ws_bytes_, need);
    HEARTH_CUDA_CHECK(cudaMemsetAsync(step_ws_, 0, step_ws_bytes_, ctx_.stream));
  }
  char* ws = static_cast<char*>(step_ws_);
  a.layers = static_cast<const StepLayerDev*>(step_layers_dev_.data());
  a.x = static_cast<__nv_bfloat16*>(step.x.data);
  a.q = reinterpret_cast<__nv_bfloat16*>(ws);
  a.k = a.q + n_q;
  a.v = a.k + n_k;
  a.og = a.v + n_k;
  a.attn = a.og + n_q;
  a.h = a.attn + n_mix;
  a.lin = reinterpret_cast<float*>(ws + lin_at);
  a.xpart = reinterpret_cast<float*>(ws + xpart_at);
  a.head_count = reinterpret_cast<int32_t*>(ws + count_at);
  a.barrier = reinterpret_cast<unsigned long long*>(ws + barrier_at);
  const int32_t pf[2] = {step.position, int32_t(kv0.first)};
  a.pos_first = upload_ints(pf, 2, 13);
  int64_t span = 0;
  a.kv_blocks = first_attn ? upload_kv_table(kv0, &span) : nullptr;
  a.inv_freq = a.rot_half > 0
                   ? reinterpret_cast<const float*>(upload_ints(step.rope.inv_freq, a.rot_half, 2))
                   : nullptr;
  submit<&cuda::decode_step>(a);
  g_decode_layers_taken.fetch_add(1, std::memory_order_relaxed);
  if (a.xattn) g_decode_xattn_taken.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace cuda

// How many one-token steps the CUDA backends ran as one kernel (test only).
int64_t cuda_decode_layers_taken() {
  return cuda::g_decode_layers_taken.load(std::memory_order_relaxed);
}
// How many of those were launched with a head's chunks spread over blocks (StepArgs::xattn; the
// kernel takes it past 64 keys for heads of 256, past 128 for heads of 128; test only).
int64_t cuda_decode_xattn_taken() {
  return cuda::g_decode_xattn_taken.load(std::memory_order_relaxed);
}

}  // namespace hearth
