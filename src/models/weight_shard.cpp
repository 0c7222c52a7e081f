#include "models/weight_shard.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/trellis.h"

namespace hearth {

void refuse_row_cut(const std::string& name, const Tensor& w) {
  if (w.packed.format == WeightFormat::Trellis && w.packed.axis == 0 && w.ndim == 2)
    fail(
        "tensor {} is trellis-coded along its output dimension (stored transposed), so tensor "
        "parallelism cannot split its outputs over ranks; run this checkpoint with "
        "--tensor-parallel 1",
        name);
}

namespace {

// Bytes [begin, begin + count) of each of `rows` rows, row_bytes apart in src, copied together
// into a new owned buffer.
void* copy_runs(std::vector<Buffer>& owned, const void* src, int64_t rows, size_t row_bytes,
                size_t begin, size_t count) {
  Buffer buf(size_t(rows) * count);
  auto* dst = static_cast<std::byte*>(buf.data());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + size_t(r) * count,
                static_cast<const std::byte*>(src) + size_t(r) * row_bytes + begin, count);
  owned.push_back(std::move(buf));
  return owned.back().data();
}

// The columns `cols` of trellis weight `w` into `t` (w with the narrower shape).
Tensor trellis_columns(WeightStore& store, std::vector<Buffer>& owned, const std::string& name,
                       Tensor t, const Tensor& w, ShardRange cols, int world) {
  const int64_t out = w.dim(0), in = w.dim(1), bits = w.packed.bits;
  const size_t scale_bytes = dtype_size(w.packed.param_dtype);
  if (w.packed.axis == 0) {
    // Stored [in, out]: the inputs are stored rows, each coded along the outputs with its scale.
    const size_t row_bytes = size_t(quant::TrellisSpec::row_words(out, int(bits))) * 4;
    t.data = static_cast<std::byte*>(w.data) + size_t(cols.begin) * row_bytes;
    t.packed.scales =
        static_cast<const std::byte*>(w.packed.scales) + size_t(cols.begin) * scale_bytes;
    return t;
  }
  constexpr int64_t kBlock = quant::TrellisSpec::kBlock;
  if (cols.begin % kBlock != 0 || cols.size() % kBlock != 0)
    fail(
        "tensor {}: its {} inputs split over {} ranks give {} each, not whole trellis blocks of "
        "{}; use a tensor-parallel size that keeps the blocks whole, or --tensor-parallel 1",
        name, in, world, cols.size(), kBlock);
  // Each row's blocks for these inputs are one run of words; the row's scale serves them all.
  const size_t block_bytes = size_t(quant::TrellisSpec::block_words(int(bits))) * 4;
  const size_t begin = size_t(cols.begin / kBlock) * block_bytes,
               count = size_t(cols.size() / kBlock) * block_bytes;
  t.data = copy_runs(owned, w.data, out, size_t(in / kBlock) * block_bytes, begin, count);
  store.note_copy(t.data, size_t(out) * count, w.data);
  return t;
}

}  // namespace

Tensor weight_columns(WeightStore& store, std::vector<Buffer>& owned, const std::string& name,
                      const Tensor& w, ShardRange cols, int world) {
  const int64_t rows = w.dim(0), in = w.dim(1);
  if (cols.begin == 0 && cols.end == in) return w;
  Tensor t = w;
  t.shape[1] = cols.size();
  if (w.packed.format == WeightFormat::Trellis)
    return trellis_columns(store, owned, name, t, w, cols, world);
  if (!w.is_packed()) {
    const size_t elem = dtype_size(w.dtype);
    t.data = copy_runs(owned, w.data, rows, size_t(in) * elem, size_t(cols.begin) * elem,
                       size_t(cols.size()) * elem);
    store.note_copy(t.data, size_t(rows * cols.size()) * elem, w.data);
    return t;
  }
  // Whole quantization groups: each row's codes, scales and biases for them are contiguous runs
  // (a group of 32 or more codes fills whole 32-bit words).
  const int64_t group = w.packed.group_size, bits = w.packed.bits;
  if (cols.begin % group != 0 || cols.size() % group != 0 || cols.begin * bits % 32 != 0)
    fail(
        "tensor {}: its {} inputs split over {} ranks give {} each, not whole quantization "
        "groups of {}; use a tensor-parallel size that keeps the groups whole, or "
        "--tensor-parallel 1",
        name, in, world, cols.size(), group);
  const size_t code_row = size_t(in * bits / 8), param = dtype_size(w.packed.param_dtype);
  const size_t group_row = size_t(in / group) * param;
  t.data = copy_runs(owned, w.data, rows, code_row, size_t(cols.begin * bits / 8),
                     size_t(cols.size() * bits / 8));
  store.note_copy(t.data, size_t(rows * cols.size() * bits / 8), w.data);
  const size_t first = size_t(cols.begin / group) * param, n = size_t(cols.size() / group) * param;
  t.packed.scales = copy_runs(owned, w.packed.scales, rows, group_row, first, n);
  if (w.packed.biases)
    t.packed.biases = copy_runs(owned, w.packed.biases, rows, group_row, first, n);
  return t;
}

}  // namespace hearth
