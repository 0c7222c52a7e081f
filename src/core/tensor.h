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

// How a weight's values are stored. Dense: `data` holds them in `dtype`. Packed formats
// (src/quant): `data` holds uint32 codes, the tensor's shape is the logical one ([out, in], or
// [n_expert, out, in]) and PackedWeight says how to read the codes.
enum class WeightFormat : uint8_t { Dense, Affine, Trellis };

struct PackedWeight {
  WeightFormat format = WeightFormat::Dense;
  uint8_t bits = 0;
  // Trellis: 1 when each output row is coded along the input dimension, 0 when the matrix is
  // stored transposed ([in, out], coded along the output dimension).
  uint8_t axis = 1;
  uint16_t group_size = 0;         // affine: values per scale and bias; trellis: the block length
  DType param_dtype = DType::F32;  // of scales and biases
  const void* scales = nullptr;    // affine: [.., out, in / group_size]; trellis: one per row
  const void* biases = nullptr;    // affine only, shaped as scales
};

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  Device device = Device::CPU;
  PackedWeight packed;  // format Dense unless a packed weight

  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> dims, Device device = Device::CPU);

  bool empty() const { return data == nullptr; }
  bool is_packed() const { return packed.format != WeightFormat::Dense; }
  int64_t numel() const;
  // Bytes of `data`: the values, or a packed weight's codes (its scales and biases not counted).
  size_t nbytes() const;
  // All the bytes that store it: nbytes(), plus a packed weight's scales and biases.
  size_t stored_bytes() const;
  // dim(-1) is the innermost dimension.
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  // Innermost dimension, and the product of the others: a tensor seen as a matrix.
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, end) along the outermost dimension (of a packed weight too, its scales and
  // biases following, except for the rows of a transposed 2-D trellis matrix: an error).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same data, new shape with the same element count (a packed weight keeps its innermost
  // dimension).
  Tensor reshaped(std::initializer_list<int64_t> dims) const;
  // "[2, 64] BF16"
  std::string describe() const;
};

}  // namespace hearth
