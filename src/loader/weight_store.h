// WeightStore: every tensor of a checkpoint directory (one or several .safetensors files, with or
// without a model.safetensors.index.json), by name, and the weight audit: the model takes each
// tensor it uses with the shape it expects, ignores what it deliberately skips, and audit() fails
// naming everything left over. Invariants: names are unique across files; tensors returned point
// into the read-only mappings, which live as long as the store (moving the store keeps them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "loader/quantization.h"

namespace hearth {

class SafetensorsFile;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // read-only mapped memory
  size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages
};

class WeightStore {
 public:
  // Loads `dir`: the shards of model.safetensors.index.json if present, else model.safetensors,
  // else every *.safetensors file in it. Throws hearth::Error naming the directory, file or tensor.
  static WeightStore open(const std::filesystem::path& dir);
  // Loads the given files (names must not repeat across them); `dir` is only used in messages.
  static WeightStore open_files(const std::vector<std::filesystem::path>& files,
                                const std::filesystem::path& dir);

  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  ~WeightStore();

  const std::filesystem::path& dir() const { return dir_; }
  size_t size() const { return entries_.size(); }
  bool contains(const std::string& name) const;
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  std::vector<std::string> names() const;                 // sorted
  // Renames a tensor (checkpoint-name normalisation at load); error if `from` is absent or `to`
  // exists. Keeps its taken/ignored state.
  void rename(const std::string& from, const std::string& to);

  // Called as tensors are first taken, with the bytes taken so far and the checkpoint's total:
  // a model's loader takes each weight just before it copies or uploads it, so this follows the
  // load (LoadOptions::progress).
  using Progress = std::function<void(size_t done_bytes, size_t total_bytes)>;
  void set_progress(Progress progress) { progress_ = std::move(progress); }

  // How packed modules are read (config.json's quantization); see take().
  void set_quantization(QuantizationConfig quantization) {
    quantization_ = std::move(quantization);
  }

  // A view of the tensor, marked as used. For NAME.weight of a module that has NAME.scales, a
  // packed weight (Tensor::packed) of logical shape `expected_shape`, read with the module's
  // quantization; its codes, scales and biases are checked against that shape and marked used.
  // Fails naming the tensor if it is missing, if its shape differs from `expected_shape` (a dim of
  // -1 matches anything, one below -1 is an error; `from_config` says where the expectation came
  // from, e.g. "hidden_size=64"), or if its data is misaligned for its dtype. Taking a tensor twice
  // is allowed (tied embeddings).
  Tensor take(const std::string& name, std::vector<int64_t> expected_shape,
              std::string_view from_config = {});
  // As take(), but an empty Tensor if the tensor is absent.
  Tensor take_optional(const std::string& name, std::vector<int64_t> expected_shape,
                       std::string_view from_config = {});
  // Marks every not-yet-taken tensor whose name starts with `prefix` as deliberately unused
  // (e.g. a vision tower); returns how many were marked.
  size_t ignore_prefix(const std::string& prefix);
  // Throws naming every tensor neither taken nor ignored:
  // "unused tensor(s) in checkpoint DIR: a, b, ... (N total)".
  void audit() const;
  // Names neither taken nor ignored, sorted.
  std::vector<std::string> unused() const;

  // A loader's copy of (rows of) a checkpoint tensor: [copy, copy + nbytes) holds data of the
  // tensor whose data contains `source` (re-laid fused projections). Lets checkpoint_name_of
  // trace the copy back.
  void note_copy(const void* copy, size_t nbytes, const void* source);
  // The name, as in the checkpoint's files (before any rename), of the tensor whose data holds
  // address p, following noted copies; empty when p is in none. For tools that watch a model run
  // and must name the weights its ops receive (calibration).
  std::string checkpoint_name_of(const void* p) const;

  size_t total_bytes() const;
  std::map<DType, size_t> bytes_by_dtype() const;
  // Per storage format ("BF16", "affine 4-bit g64", ...): weights and the bytes that hold them
  // (a packed module's codes, scales and biases together), over the tensors taken.
  struct FormatTotals {
    int64_t params = 0;
    size_t bytes = 0;
  };
  std::map<std::string, FormatTotals> taken_by_format() const;
  int64_t total_params() const;
  // The same over the tensors taken (not ignored: vision towers of a text-only load).
  size_t taken_bytes() const;
  int64_t taken_params() const;

 private:
  enum class State : uint8_t { Unused, Taken, Ignored };
  struct Entry {
    TensorInfo info;
    State state = State::Unused;
    int64_t params = -1;    // set when taken as part of a packed weight: its share of the weights
    std::string format;     // a packed weight's format ("affine 4-bit g64"); empty: the dtype
    std::string file_name;  // the name in the checkpoint's files (kept across renames)
  };
  struct Copy {
    const char* begin;
    const char* end;
    const void* source;
  };
  WeightStore() = default;
  Tensor take_entry(Entry& entry, const std::vector<int64_t>& expected_shape,
                    std::string_view from_config);
  Tensor take_packed(Entry& codes, const std::string& module,
                     const std::vector<int64_t>& expected_shape, std::string_view from_config);
  static int64_t params_of(const Entry& entry);

  std::filesystem::path dir_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;  // keep the mappings alive
  std::map<std::string, Entry> entries_;  // node-based: TensorInfo pointers survive moves/renames
  QuantizationConfig quantization_;
  Progress progress_;
  size_t progress_bytes_ = 0;
  std::vector<Copy> copies_;
};

}  // namespace hearth
