// Writing safetensors checkpoints tensor by tensor, so a converter never holds its whole output:
// the layout (files, headers, offsets) is fixed up front from every tensor's name, dtype and
// shape, then each tensor's bytes are written to their place whenever they are ready, in any
// order. Files are split as mlx-lm does: ~5 GiB shards named model-00001-of-0000N.safetensors,
// or one model.safetensors when it fits, and model.safetensors.index.json in both cases (its
// weight_map and metadata.total_size, as mlx-lm writes it).
// Invariants of every file written: the header is padded with spaces so the data section starts
// at a multiple of 8; tensors are packed without holes (a safetensors reader rejects holes),
// widest dtype first and by name within a width, so every tensor is aligned for its dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace hearth {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t nbytes() const;  // numel · dtype size
};

struct SafetensorsWriterOptions {
  // A new shard starts when the next tensor would take the current one past this (a tensor
  // larger than the limit gets a shard of its own). mlx-lm's limit: 5 GiB.
  size_t max_shard_bytes = size_t(5) << 30;
  std::map<std::string, std::string> metadata;  // "__metadata__", e.g. {"format": "mlx"}
};

class SafetensorsWriter {
 public:
  // Lays out `entries` (unique names, any order) in `dir`, which must exist, and writes the
  // files' headers. Throws hearth::Error naming the file or tensor.
  SafetensorsWriter(const std::filesystem::path& dir, std::vector<SafetensorsEntry> entries,
                    SafetensorsWriterOptions options = {});
  ~SafetensorsWriter();  // closes the files; never deletes them (the caller owns `dir`)
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes tensor `name`'s data (exactly its nbytes). Each tensor once, in any order.
  void write(const std::string& name, const void* data, size_t nbytes);
  // Writes the next `nbytes` of tensor `name`, after the parts written so far: a tensor may be
  // written in consecutive parts (a stacked MoE tensor expert by expert), tensors in any order.
  // The tensor is complete once its parts add up to its nbytes; more is an error.
  void write_part(const std::string& name, const void* data, size_t nbytes);
  // Checks that every tensor was written, writes the index and flushes everything to disk
  // (fsync). Returns the paths written, the index last.
  std::vector<std::filesystem::path> finish();

  size_t data_bytes() const { return data_bytes_; }  // all tensors' bytes (the index's total_size)
  size_t file_bytes() const;                         // the .safetensors files' sizes
  size_t n_files() const { return files_.size(); }

 private:
  struct Slot {
    size_t file = 0;
    size_t offset = 0;  // from the start of the file
    size_t nbytes = 0;
    size_t written = 0;    // bytes written so far, from the start of the tensor
    bool started = false;  // a part was written (an empty tensor too)
  };
  struct File {
    std::filesystem::path path;
    int fd = -1;
    size_t size = 0;
  };
  std::filesystem::path dir_;
  std::map<std::string, Slot> slots_;
  std::vector<File> files_;
  size_t data_bytes_ = 0;
  bool finished_ = false;
};

// Writes `bytes` to `path` (replacing it) and fsyncs it. Throws naming the path.
void write_file_durably(const std::filesystem::path& path, std::string_view bytes);
// fsyncs a file or directory (a directory: so that the names created in it are durable).
void fsync_path(const std::filesystem::path& path);

}  // namespace hearth
