// Buffer: owning, 64-byte-aligned host memory (RAII). Used for activations, KV caches and
// converted weights. Move-only.
#pragma once
#include <cstddef>
#include <initializer_list>

#include "core/tensor.h"

namespace hearth {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Grows (never shrinks) to at least `bytes`; contents are preserved.
  void reserve(size_t bytes);
  // A tensor view over the start of this buffer; fails if it does not fit.
  Tensor view(DType dtype, std::initializer_list<int64_t> dims) const;

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hearth
