#include "core/tensor.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hearth {

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  if (dims.size() > kMaxDims) fail("tensor rank {} exceeds {}", dims.size(), kMaxDims);
  for (int64_t d : dims) shape[ndim++] = d;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

size_t Tensor::nbytes() const {
  if (is_packed()) return size_t(numel()) * packed.bits / 8;
  return size_t(numel()) * dtype_size(dtype);
}

namespace {

// Scales (and biases) of a packed weight: one per affine group; for trellis one per coded row,
// an output row, or an input row when stored transposed ([.., out, in] holds numel / out).
int64_t packed_params(const Tensor& t) {
  if (t.packed.format == WeightFormat::Affine) return t.numel() / t.packed.group_size;
  return t.packed.axis == 1 ? t.numel() / t.cols() : t.numel() / t.dim(-2);
}

}  // namespace

size_t Tensor::stored_bytes() const {
  if (!is_packed() || ndim == 0) return nbytes();
  const size_t params = size_t(packed_params(*this));
  return nbytes() + params * dtype_size(packed.param_dtype) * (packed.biases ? 2 : 1);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  Tensor t = *this;
  const int64_t row_elems = ndim == 0 ? 1 : numel() / shape[0];
  t.shape[0] = end - begin;
  if (!is_packed()) {
    t.data = static_cast<char*>(data) + size_t(begin * row_elems) * dtype_size(dtype);
    return t;
  }
  if (packed.format == WeightFormat::Trellis && packed.axis == 0 && ndim == 2)
    fail("cannot take rows {}..{} of {}: a transposed trellis matrix is coded along its rows",
         begin, end, describe());
  t.data = static_cast<char*>(data) + size_t(begin * row_elems) * packed.bits / 8;
  const size_t param_bytes =
      size_t(begin * (packed_params(*this) / shape[0])) * dtype_size(packed.param_dtype);
  t.packed.scales = static_cast<const char*>(packed.scales) + param_bytes;
  if (packed.biases) t.packed.biases = static_cast<const char*>(packed.biases) + param_bytes;
  return t;
}

Tensor Tensor::reshaped(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims, device);
  if (t.numel() != numel()) fail("cannot reshape {} to {} elements", describe(), t.numel());
  if (is_packed()) {
    if (t.cols() != cols())
      fail("cannot reshape the packed weight {}: its innermost dimension must stay", describe());
    t.packed = packed;
  }
  return t;
}

std::string Tensor::describe() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  s += "] ";
  switch (packed.format) {
    case WeightFormat::Dense:
      return s + std::string(dtype_name(dtype));
    case WeightFormat::Affine:
      return s + fmt::format("affine {}-bit g{}", packed.bits, packed.group_size);
    case WeightFormat::Trellis:
      return s +
             fmt::format("trellis {}-bit{}", packed.bits, packed.axis == 0 ? " (transposed)" : "");
  }
  return s;
}

}  // namespace hearth
