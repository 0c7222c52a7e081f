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

// Fails unless the rows of `w` (the checkpoint's tensor `name`) may be cut (column-parallel
// products, vocabulary shards): every format can, except a trellis matrix stored transposed
// (coded along its output rows; hearth's quantizer stores only down projections so, and those
// are row-parallel).
void refuse_row_cut(const std::string& name, const Tensor& w);

// The columns `cols` of the [rows, in] weight `w` (a row-parallel rank's inputs): `w` itself when
// they are all of them, else a copy owned by `owned` and noted in `store` (a row's columns are
// not contiguous). An affine weight is cut by whole quantization groups, whole 32-bit words of
// codes; a trellis weight by whole 256-weight blocks (each block decodes alone, and its row's
// scale stays), or, stored transposed, by its stored rows (a view). A cut inside a group or a
// block is refused naming `name`, the numbers and `world`.
Tensor weight_columns(WeightStore& store, std::vector<Buffer>& owned, const std::string& name,
                      const Tensor& w, ShardRange cols, int world);

}  // namespace hearth
