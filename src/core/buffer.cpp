#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace hearth {

namespace {
void* aligned_alloc_or_fail(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) fail("out of memory allocating {} bytes", bytes);
  return p;
}
}  // namespace

Buffer::Buffer(size_t bytes) : data_(aligned_alloc_or_fail(bytes)), size_(bytes) {}
Buffer::~Buffer() { std::free(data_); }
Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Buffer::reserve(size_t bytes) {
  if (bytes <= size_) return;
  void* p = aligned_alloc_or_fail(bytes);
  if (data_) std::memcpy(p, data_, size_);
  std::free(data_);
  data_ = p;
  size_ = bytes;
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> dims) const {
  Tensor t(data_, dtype, dims);
  if (t.nbytes() > size_) fail("tensor {} does not fit a buffer of {} bytes", t.describe(), size_);
  return t;
}

}  // namespace hearth
