// Calibration for Hessian-aware quantization (LDLQ): runs a float checkpoint on the CPU over a
// calibration text and returns, per linear module, H = Σ x·xᵀ over the inputs it saw
// (HessianCaptureBackend). The text is tokenized once (with BOS when the tokenizer adds one, as
// `hearth perplexity` does) and its first n_tokens tokens run as sequences of seq_len tokens, each
// from an empty state, every position's logits computed so the output head sees every row too.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/hessian_capture.h"

namespace hearth {

struct CalibrationOptions {
  int64_t n_tokens = 8192;                 // tokens of the text used (the first ones)
  int64_t seq_len = 512;                   // tokens per sequence
  size_t memory_budget = size_t(4) << 30;  // bytes of H in RAM; the rest spill (hessian_capture.h)
  std::filesystem::path spill_dir;         // empty: the system's temp dir
  std::function<void(int64_t tokens_done, int64_t tokens_total)> on_progress;
  const std::atomic<bool>* cancel = nullptr;  // set: stops after the current sequence, throws
};

class CalibrationHessians {
 public:
  CalibrationHessians() = default;
  // by_module: a module's index into acc.
  CalibrationHessians(std::vector<HessianCaptureBackend::Accumulator> acc,
                      std::map<std::string, size_t> by_module);
  // H [n, n] of `module` (a checkpoint weight's name without ".weight"), or nullptr when the
  // module has none: not run, a lookup table (a tied embedding is also the head, but LDLQ under
  // the head's inputs alone would neglect its use as a table), or an input width other than n.
  const float* find(const std::string& module, int64_t n) const;
  size_t size() const { return by_module_.size(); }
  int64_t tokens = 0;        // calibration tokens run
  size_t bytes = 0;          // of all H
  size_t spilled_bytes = 0;  // of those in spill files
  double seconds = 0;        // loading, tokenizing and running the model

 private:
  std::vector<HessianCaptureBackend::Accumulator> acc_;
  std::map<std::string, size_t> by_module_;
};

// Loads `model_dir` on a capturing CPU backend and runs `calib_file` (UTF-8 text) through it.
// Throws hearth::Error naming the file when it is empty or gives fewer than n_tokens tokens, and
// naming the option when n_tokens or seq_len is not positive.
CalibrationHessians capture_hessians(const std::filesystem::path& model_dir,
                                     const std::filesystem::path& calib_file,
                                     const CalibrationOptions& options);
// The same on token ids (all of them; options.n_tokens is not used), without BOS handling.
CalibrationHessians capture_hessians(const std::filesystem::path& model_dir,
                                     std::span<const int32_t> tokens,
                                     const CalibrationOptions& options);

}  // namespace hearth
