// Safetensors files: memory-mapped read-only (MAP_PRIVATE) and validated once at open.
// Invariants after open(): every tensor has a known dtype, 0..4 non-negative dims, a byte range
// inside the data section whose size equals numel * dtype_size, and no two non-empty tensors
// overlap. Tensor data points into the mapping (no copy) and lives as long as the SafetensorsFile.
// Data may be misaligned only if the writer did not pad the header (the official writer does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hearth {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the data section
  size_t nbytes = 0;
  const void* data = nullptr;  // into the read-only mapping; never written
};

// A read-only mapping of a whole file; unmapped on destruction. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; throws hearth::Error naming it if it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The validated contents of a safetensors image, with the invariants above.
struct SafetensorsContents {
  std::vector<SafetensorsTensor> tensors;  // sorted by offset (file order)
  std::map<std::string, std::string> metadata;
};

// Validates a whole safetensors image held in memory (header and data section); `name` labels
// every error. The tensors' data points into `bytes`, which must outlive them.
// SafetensorsFile::open is this over a mapping of the file.
SafetensorsContents safetensors_parse(const uint8_t* bytes, size_t size, const std::string& name);

class SafetensorsFile {
 public:
  // The largest header we accept; real headers are a few MB at most.
  static constexpr size_t kMaxHeaderBytes = 100u << 20;

  // Maps and validates `path`; throws hearth::Error naming the file (and tensor) on any defect.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // Sorted by offset (file order).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr if absent.
  const SafetensorsTensor* find(const std::string& name) const;
  // The "__metadata__" string map (empty if the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return map_.size(); }

 private:
  std::filesystem::path path_;
  MappedFile map_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace hearth
