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

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  Tensor t = *this;
  int64_t row_elems = ndim == 0 ? 1 : numel() / shape[0];
  t.data = static_cast<char*>(data) + size_t(begin * row_elems) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::reshaped(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims, device);
  if (t.numel() != numel()) fail("cannot reshape {} to {} elements", describe(), t.numel());
  return t;
}

std::string Tensor::describe() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] " + std::string(dtype_name(dtype));
}

}  // namespace hearth
