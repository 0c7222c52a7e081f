// The attention kernels behind cuda::attention (common.h): the SIMT kernel of attention.cu (any
// head dim, decode split-K) and the tensor-core prefill kernel of attention_mma.cu (head dims 64,
// 128, 256; n_tokens > 8). attention() picks one; tests and benchmarks may pin the choice.
#pragma once
#include "backend/cuda/common.h"

namespace hearth::cuda {

// Which kernel attention() runs for prefill (n_tokens > 8), and attention_rows for decode rows.
// Auto: the tensor-core kernels where they apply, the prefill query tile (64 or 128 rows) chosen
// from the grid size. Mma64 / Mma128 pin the prefill tile (Mma128 falls back to 64 where 128 is
// not built, e.g. head_dim 256); Simt pins the SIMT kernel for both. Where a tensor-core kernel
// does not apply (head dim, alignment, dtype, group) the SIMT kernel runs whatever is pinned.
// Process-wide; for tests and benchmarks, not for production use.
enum class AttentionKernel : int { Auto = 0, Simt = 1, Mma64 = 2, Mma128 = 3 };
void attention_set_kernel(AttentionKernel k);

// attention_mma.cu. init: once per device, outside graph capture (raises the shared-memory
// limits of the configurations that fit on the device). block_m: 64 or 128 query rows per block.
void attention_mma_init();
bool attention_mma_supported(const Ten& out, const Ten& q, const KvDev& kv,
                             const AttentionParams& p, int block_m);
void attention_mma(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                   const int32_t* positions, const AttentionParams& p, int block_m);

// attention_rows_mma.cu: decode rows (attention_rows) on tensor cores, the group's query heads
// as the rows of one mma tile. init: once per device, outside graph capture. The split-K is the
// caller's (split_len keys per split, n_splits of them; the workspace as attention.cu sizes it).
void attention_rows_mma_init();
bool attention_rows_mma_supported(const Ten& out, const Ten& q, const KvDev& kv,
                                  const AttentionParams& p);
void attention_rows_mma(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const SeqKv* seqs,
                        const int32_t* positions, const AttentionParams& p, int split_len,
                        int n_splits);

}  // namespace hearth::cuda
