// Tensor: a non-owning view of contiguous row-major data (outermost dimension first).
// Weights are views into the memory-mapped checkpoint; activations are views into scratch
// arenas. Owning memory is a Buffer (buffer.h).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace hearth {

enum class Device : uint8_t { CPU, CUDA };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  Device device = Device::CPU;

  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> dims, Device device = Device::CPU);

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  // dim(-1) is the innermost dimension.
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  // Innermost dimension, and the product of the others: a tensor seen as a matrix.
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, end) along the outermost dimension.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same data, new shape with the same element count.
  Tensor reshaped(std::initializer_list<int64_t> dims) const;
  // "[2, 64] BF16"
  std::string describe() const;
};

}  // namespace hearth
