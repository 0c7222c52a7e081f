// DeviceBuffer: owning memory allocated by a backend (host memory for the CPU backend, device
// memory for CUDA). Move-only; frees through the deleter it was made with.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <utility>

#include "core/tensor.h"

namespace hearth {

class DeviceBuffer {
 public:
  using Deleter = void (*)(void*);

  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t size, Device device, Deleter deleter)
      : data_(data), size_(size), device_(device), deleter_(deleter) {}
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        device_(o.device_),
        deleter_(std::exchange(o.deleter_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      device_ = o.device_;
      deleter_ = std::exchange(o.deleter_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  // A view over the start of the buffer (the caller sized the buffer for it).
  Tensor view(DType dtype, std::initializer_list<int64_t> dims) const {
    return Tensor(data_, dtype, dims, device_);
  }

 private:
  void release() {
    if (data_ && deleter_) deleter_(data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  size_t size_ = 0;
  Device device_ = Device::CPU;
  Deleter deleter_ = nullptr;
};

}  // namespace hearth
