// The composed forms of the Backend's optional fused ops: correct on any backend, one op after
// another. Backends that can do better override them (the CUDA backend for decode).
#include "backend/backend.h"

#include <vector>

#include "backend/token_pick.h"

namespace hearth {

void Backend::linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                          const InputNorm* norm) {
  if (norm) {  // normalise into scratch, then this backend's own plain form
    rms_norm(norm->scratch, x, norm->w, norm->eps, norm->offset);
    return linear_many(norm->scratch, outs, n_outs, nullptr);
  }
  for (int i = 0; i < n_outs; ++i) linear(outs[i].y, x, outs[i].w, outs[i].bias);
}

void Backend::linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x,
                         const LinearOut& gate, const LinearOut& up, Activation act,
                         const InputNorm* norm) {
  if (norm) {
    rms_norm(norm->scratch, x, norm->w, norm->eps, norm->offset);
    return linear_glu(y, up_scratch, norm->scratch, gate, up, act, nullptr);
  }
  linear(y, x, gate.w, gate.bias);
  linear(up_scratch, x, up.w, up.bias);
  glu(y, y, up_scratch, act);
}

void Backend::linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                              float scale) {
  linear(proj.y, in, proj.w, proj.bias);
  add(x, x, proj.y, scale);
}

void Backend::qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& q_norm, const Tensor& k_norm, float eps,
                                 float weight_offset, const RopeParams* rope, const KvView& kv,
                                 const int32_t* positions) {
  if (!q_norm.empty()) rms_norm(q, q, q_norm, eps, weight_offset);
  if (!k_norm.empty()) rms_norm(k, k, k_norm, eps, weight_offset);
  if (rope) {
    this->rope(q, positions, *rope);
    this->rope(k, positions, *rope);
  }
  kv_store(kv, k, v, positions);
}

void Backend::pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) {
  const float* row = logits.as<float>();
  if (logits.device != Device::CPU) {  // a backend without its own picker: via the host
    thread_local std::vector<float> host;
    host.resize(size_t(logits.numel()));
    to_host_f32(host.data(), logits);
    row = host.data();
  }
  thread_local std::vector<std::pair<float, int32_t>> scratch;
  *dst = pick_token_host(std::span<const float>(row, size_t(logits.numel())), pick, scratch);
}

}  // namespace hearth
