// Causal softmax attention over the ring-addressed KV cache, one (token, head) pair per task.
// Scores and softmax are f32, as in the reference (eager attention in float32). GQA maps query
// head h onto key/value head h / (n_head / n_head_kv).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"

namespace hearth::cpu {

namespace {

// 8 independent partial sums so the loop vectorises without reassociation flags.
inline float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void attend_one(float* out, const float* q, const KvView& kv, int64_t pos, int kv_head,
                const AttentionParams& p, std::vector<float>& scores) {
  int64_t lo = kv.first;
  if (p.window > 0) lo = std::max<int64_t>(lo, pos - p.window + 1);
  const int64_t hi = std::min<int64_t>(pos, kv.end - 1);
  const int64_t n = hi - lo + 1;
  const int hd = p.head_dim;
  const int64_t row = int64_t(p.n_head_kv) * hd;
  if (n <= 0) {
    std::fill(out, out + hd, 0.0f);
    return;
  }
  scores.resize(size_t(n));
  float max_score = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = (lo + i) % kv.capacity;
    float s = dot(q, kv.k.as<const float>() + slot * row + int64_t(kv_head) * hd, hd) * p.scale;
    if (p.softcap > 0.0f) s = std::tanh(s / p.softcap) * p.softcap;
    scores[size_t(i)] = s;
    max_score = std::max(max_score, s);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    scores[size_t(i)] = std::exp(scores[size_t(i)] - max_score);
    sum += scores[size_t(i)];
  }
  const float inv_sum = 1.0f / sum;
  std::fill(out, out + hd, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = (lo + i) % kv.capacity;
    const float w = scores[size_t(i)] * inv_sum;
    const float* v = kv.v.as<const float>() + slot * row + int64_t(kv_head) * hd;
    for (int d = 0; d < hd; ++d) out[d] += w * v[d];
  }
}

}  // namespace

void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
               const AttentionParams& p, ThreadPool& pool) {
  const int64_t n_tokens = q.dim(0);
  const int group = p.n_head / p.n_head_kv;
  const int64_t tasks = n_tokens * p.n_head;
  pool.parallel_for(tasks, 4, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / p.n_head;
      const int h = int(task % p.n_head);
      const int64_t offset = (t * p.n_head + h) * p.head_dim;
      attend_one(out.as<float>() + offset, q.as<const float>() + offset, kv, positions[t],
                 h / group, p, scores);
    }
  });
}

}  // namespace hearth::cpu
