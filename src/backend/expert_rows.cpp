#include "backend/expert_rows.h"

#include "core/error.h"

namespace hearth {

void ExpertRows::group(const int32_t* ids, int64_t n, int64_t k, int64_t E) {
  const int64_t P = n * k;
  offset.assign(size_t(E + 1), 0);
  for (int64_t p = 0; p < P; ++p) {
    if (ids[p] < 0 || ids[p] >= E)
      fail("MoE routing chose expert {} of {} (token {}, slot {})", ids[p], E, p / k, p % k);
    ++offset[size_t(ids[p]) + 1];
  }
  active = 0;
  for (int64_t e = 0; e < E; ++e) {
    active += offset[size_t(e + 1)] > 0;
    offset[size_t(e + 1)] += offset[size_t(e)];
  }
  // Pairs in (token, slot) order, so each expert's rows come in ascending token order.
  cursor_.assign(offset.begin(), offset.end() - 1);
  src.resize(size_t(P));
  pos.resize(size_t(P));
  for (int64_t p = 0; p < P; ++p) {
    const int64_t q = cursor_[size_t(ids[p])]++;
    src[size_t(q)] = int32_t(p / k);
    pos[size_t(p)] = int32_t(q);
  }
}

}  // namespace hearth
