// Cutting a checkpoint's weights for one rank of a tensor-parallel model (tensor_parallel.h), as
// the architectures share it: column-parallel rows are views (slice_rows), row-parallel columns
// are copied here, a quantized weight by whole groups; what cannot be cut is refused by name.
#pragma once
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "loader/weight_store.h"
#include "parallel/communicator.h"

namespace hearth {

// Fails unless `w` (the checkpoint's tensor `name`) may be cut: dense and affine weights can,
// trellis-coded ones not yet (their blocks and per-row scales would have to be re-cut).
void refuse_unshardable(const std::string& name, const Tensor& w);

// The columns `cols` of the [rows, in] weight `w` (a row-parallel rank's inputs): `w` itself when
// they are all of them, else a copy owned by `owned` and noted in `store` (a row's columns are
// not contiguous). An affine weight is cut by whole quantization groups, whole 32-bit words of
// codes; a cut inside a group is refused naming `name`, the numbers and `world`.
Tensor weight_columns(WeightStore& store, std::vector<Buffer>& owned, const std::string& name,
                      const Tensor& w, ShardRange cols, int world);

}  // namespace hearth
