// .npy files (NumPy's array format): the exchange format for reference fixtures from
// transformers and for `hearth logits` output. We write v1.0, little-endian, C order; we read
// v1/v2/v3 headers with dtypes '<f4' (as float) and '<i4' / '<i8' (as int64). Anything else is an
// error naming the file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/dtype.h"

namespace hearth {

struct NpyArray {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;   // as stored: F32, I32 or I64
  std::vector<float> f32;     // when dtype == F32
  std::vector<int64_t> ints;  // when dtype is I32 or I64 (widened)

  bool is_float() const { return dtype == DType::F32; }
  int64_t numel() const;
};

void npy_write_f32(const std::filesystem::path& path, const float* data,
                   const std::vector<int64_t>& shape);
void npy_write_i32(const std::filesystem::path& path, const int32_t* data,
                   const std::vector<int64_t>& shape);
NpyArray npy_read(const std::filesystem::path& path);

}  // namespace hearth
