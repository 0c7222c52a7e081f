#include "quant/quantize_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"
#include "quant/affine.h"

namespace hearth::quant {

namespace fs = std::filesystem;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "model.layers.3.mlp.experts.7.down_proj" -> "model.layers.*.mlp.experts.*.down_proj": how the
// notices name a group of modules.
std::string name_pattern(const std::string& module) {
  std::string out;
  size_t pos = 0;
  while (pos <= module.size()) {
    size_t dot = module.find('.', pos);
    if (dot == std::string::npos) dot = module.size();
    const std::string part = module.substr(pos, dot - pos);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    out += (pos ? "." : "") + (digits ? std::string("*") : part);
    pos = dot + 1;
  }
  return out;
}

bool suffix_matches(const std::string& module, const std::string& suffix) {
  if (module.size() < suffix.size() ||
      module.compare(module.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  return module.size() == suffix.size() || module[module.size() - suffix.size() - 1] == '.';
}

// mlx-vlm keeps vision and audio encoders in float; text-only loaders drop them anyway.
bool in_encoder_tower(const std::string& module) {
  const std::string path = "." + module + ".";
  for (const char* part :
       {".visual.", ".vision_tower.", ".vision_model.", ".audio_tower.", ".audio_model."})
    if (path.find(part) != std::string::npos) return true;
  return false;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::vector<ModuleOverride> parse_module_bits(std::string_view text) {
  std::vector<ModuleOverride> out;
  if (trim(text).empty()) return out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) fail("--module-bits: empty item in '{}'", text);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      fail("--module-bits: expected MODULE=BITS or MODULE=false, got '{}'", item);
    ModuleOverride o{std::string(trim(item.substr(0, eq))), 0};
    const std::string value(trim(item.substr(eq + 1)));
    if (o.suffix.empty() || o.suffix.front() == '.' || o.suffix.back() == '.')
      fail("--module-bits: '{}' does not name a module (e.g. mlp.down_proj=8)", item);
    if (o.suffix.ends_with(".weight"))
      fail("--module-bits: '{}': name the module without '.weight' (e.g. mlp.down_proj=8)", item);
    if (value != "false") {
      size_t used = 0;
      try {
        o.bits = std::stoi(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != value.size() || o.bits <= 0)
        fail("--module-bits: '{}': the value must be a number of bits or false", item);
    }
    for (const auto& prev : out)
      if (prev.suffix == o.suffix) fail("--module-bits: '{}' is given twice", o.suffix);
    out.push_back(std::move(o));
  }
  return out;
}

namespace {

// The spec's format (nullptr for "none"), after checking its parameters and those of every
// override.
const QuantFormat* checked_format(const QuantizeSpec& spec) {
  if (spec.embedding_bits > 0 && !affine_bits_supported(spec.embedding_bits))
    fail("--embedding-bits must be 2, 3, 4, 5, 6 or 8 (affine) or false, got {}",
         spec.embedding_bits);
  if (spec.format == "none") {
    if (!spec.rotation)
      fail("--format none writes a float copy, which is only useful with --rotate");
    if (!spec.overrides.empty()) fail("--module-bits needs a format that quantizes, not none");
    return nullptr;
  }
  const QuantFormat* format = quant_format_find(spec.format);
  if (!format)
    fail("--format: unknown format '{}' (available: {}, none)", spec.format, quant_format_names());
  format->check(spec.params);
  for (const auto& o : spec.overrides) {
    if (o.bits == 0) continue;
    try {
      format->check({o.bits, spec.params.group_size});
    } catch (const Error& e) {
      fail("--module-bits {}={}: {}", o.suffix, o.bits, e.what());
    }
  }
  return format;
}

// The token embedding and the output head, which --embedding-bits sets apart.
bool is_embedding_or_head(const std::string& module) {
  return suffix_matches(module, "embed_tokens") || suffix_matches(module, "lm_head");
}

}  // namespace

namespace {

// Builds a QuantizePlan module by module: the override that applies, the format and parameters,
// the outputs, config.json's entry, and the notices for modules left in float.
class PlanBuilder {
 public:
  PlanBuilder(const QuantizeSpec& spec, QuantizePlan& plan)
      : spec_(spec), plan_(plan), override_used_(spec.overrides.size(), false) {}

  // An input tensor written under its own name: quantized when it is a linear-shaped 2-D
  // NAME.weight (no "norm" in its name) that fits, else copied as it is.
  void add_tensor(const PlanSource& s) {
    PlannedTensor t;
    t.parts = {input_matrix_whole(s)};
    const TensorInfo& info = *s.info;
    const bool linear_shaped = plan_.format && info.shape.size() == 2 &&
                               s.name.ends_with(".weight") &&
                               s.name.find("norm") == std::string::npos;
    if (!linear_shaped || !plan_module(t, s.name.substr(0, s.name.size() - 7), info.shape[0],
                                       info.shape[1], info.dtype, 0))
      t.outputs = {{s.name, info.dtype, info.shape}};
    add(std::move(t));
  }

  // MoE experts written as one stack, STACK.weight [E, out, in]: quantized, or in float.
  void add_stack(const StackedExperts& stack) {
    PlannedTensor t;
    t.parts = stack.experts;
    const InputMatrix& first = stack.experts.front();
    const DType dtype = first.source.info->dtype;
    const int64_t n_expert = int64_t(stack.experts.size());
    if (!plan_module(t, stack.module, first.rows, first.cols, dtype, n_expert))
      t.outputs = {{stack.module + ".weight", dtype, {n_expert, first.rows, first.cols}}};
    add(std::move(t));
  }

  // Fails on an override that matched nothing; adds a notice per reason modules stay float.
  void finish(const WeightStore& store, bool experts_stacked) {
    for (size_t i = 0; i < spec_.overrides.size(); ++i) {
      if (override_used_[i]) continue;
      const std::string& suffix = spec_.overrides[i].suffix;
      const bool names_an_expert =
          experts_stacked && ("." + suffix).find(".experts.") != std::string::npos;
      fail("--module-bits: '{}' matches no linear or embedding module of {}{}", suffix,
           store.dir().string(),
           names_an_expert ? " (MoE experts are written stacked: name them as "
                             "mlp.switch_mlp.gate_proj, up_proj or down_proj)"
                           : "");
    }
    for (const auto& s : skipped_) {
      std::vector<std::string> patterns;
      for (const auto& m : s.modules) {
        const std::string p = name_pattern(m);
        if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) patterns.push_back(p);
      }
      std::string shown;
      for (size_t i = 0; i < patterns.size() && i < 4; ++i) shown += (i ? ", " : "") + patterns[i];
      if (patterns.size() > 4) shown += fmt::format(", ... ({} more)", patterns.size() - 4);
      plan_.notices.push_back(fmt::format("{} {} {}: {} ({})", s.modules.size(),
                                          s.modules.size() == 1 ? "module stays" : "modules stay",
                                          lower(dtype_name(s.dtype)), s.reason, shown));
    }
  }

 private:
  struct Skipped {
    std::string reason;
    DType dtype;
    std::vector<std::string> modules;
  };

  void add(PlannedTensor t) {
    for (const auto& e : t.outputs) plan_.output_bytes += e.nbytes();
    plan_.tensors.push_back(std::move(t));
  }

  // Decides module `module`, [rows, cols] of `dtype` (`stacked` of them when > 0): quantized
  // (t gets its format, parameters and outputs; true) or left in float (false).
  bool plan_module(PlannedTensor& t, const std::string& module, int64_t rows, int64_t cols,
                   DType dtype, int64_t stacked) {
    const ModuleOverride* over = nullptr;
    for (size_t i = 0; i < spec_.overrides.size(); ++i) {
      const auto& o = spec_.overrides[i];
      if (!suffix_matches(module, o.suffix)) continue;
      override_used_[i] = true;
      if (!over || o.suffix.size() > over->suffix.size()) over = &o;
    }
    const QuantFormat* format = plan_.format;
    QuantParams params = spec_.params;
    if (over && over->bits) params.bits = over->bits;
    std::string why;
    if (over && over->bits == 0) {
      why = "--module-bits says false";
    } else if (in_encoder_tower(module)) {
      why = "vision/audio encoder, kept in float as mlx-vlm does";
    } else if (spec_.embedding_bits >= 0 && is_embedding_or_head(module)) {
      if (over)
        fail("--module-bits {}: the embedding and head are set by --embedding-bits", over->suffix);
      if (spec_.embedding_bits == 0) why = "--embedding-bits false";
      format = quant_format_find("affine");
      params = {spec_.embedding_bits, kEmbeddingGroupSize};
    }
    if (why.empty()) {
      if (format->module_params) params = format->module_params(module, params);
      why = format->unfit(rows, cols, dtype, params);
    }
    if (!why.empty()) {
      // Explicit, so a loader that trusts config.json alone does not look for its scales.
      plan_.quantization[module] = false;
      auto it = std::find_if(skipped_.begin(), skipped_.end(),
                             [&](const Skipped& s) { return s.reason == why && s.dtype == dtype; });
      if (it == skipped_.end()) {
        skipped_.push_back({why, dtype, {}});
        it = skipped_.end() - 1;
      }
      it->modules.push_back(module);
      return false;
    }
    t.module = module;
    t.format = format;
    t.params = params;
    TensorInfo matrix;  // one expert's matrix when stacked: a stack is its experts' outputs in turn
    matrix.name = module + ".weight";
    matrix.dtype = dtype;
    matrix.shape = {rows, cols};
    t.outputs = format->outputs(module, matrix, params);
    if (stacked > 0)
      for (auto& e : t.outputs) e.shape.insert(e.shape.begin(), stacked);
    // An entry wherever the defaults do not describe the module (mlx-lm's convention).
    auto entry = format->config_entry(params);
    if (entry != plan_.format->config_entry(spec_.params))
      plan_.quantization[module] = std::move(entry);
    plan_.n_quantized++;
    plan_.quantized_params += std::max<int64_t>(stacked, 1) * rows * cols;
    for (const auto& e : t.outputs) plan_.quantized_bytes += e.nbytes();
    return true;
  }

  const QuantizeSpec& spec_;
  QuantizePlan& plan_;
  std::vector<bool> override_used_;
  std::vector<Skipped> skipped_;  // in order of first appearance
};

}  // namespace

QuantizePlan quantize_plan(const WeightStore& store, const QuantizeSpec& spec) {
  QuantizePlan plan;
  plan.format = checked_format(spec);
  if (plan.format) plan.quantization = plan.format->config_entry(spec.params);

  // The tensors to write: the store's, or the rotated checkpoint's.
  std::vector<PlanSource> sources;
  if (spec.rotation) {
    plan.rotation = rotation_plan(store);
    (void)HiddenRotation(plan.rotation->hidden, spec.rotation->seed);  // refuses an unfit size
    plan.notices = plan.rotation->notices;
    for (const auto& t : plan.rotation->tensors)
      sources.push_back({t.name, t.source, t.role == RotationRole::Keep ? nullptr : &t});
  } else {
    for (const auto& name : store.names()) sources.push_back({name, store.find(name), nullptr});
  }

  // MoE experts in mlx-lm's stacked layout (encoder towers keep their names: their loaders
  // expect them), each stack planned where its first input would have been.
  StackedExpertsPlan stacking;
  if (plan.format && spec.stack_experts) {
    std::vector<PlanSource> text;
    std::copy_if(sources.begin(), sources.end(), std::back_inserter(text),
                 [](const PlanSource& s) { return !in_encoder_tower(s.name); });
    stacking = stacked_experts_plan(text);
    plan.notices.insert(plan.notices.end(), stacking.notices.begin(), stacking.notices.end());
  }
  std::map<std::string, std::vector<const StackedExperts*>> stacks_from;  // by first input
  std::set<std::string> stacked_inputs;
  for (const auto& stack : stacking.stacks) {
    stacks_from[stack.inputs.front()].push_back(&stack);
    stacked_inputs.insert(stack.inputs.begin(), stack.inputs.end());
  }

  PlanBuilder builder(spec, plan);
  for (const auto& s : sources) {
    plan.total_params += int64_t(s.info->nbytes / dtype_size(s.info->dtype));
    if (auto it = stacks_from.find(s.name); it != stacks_from.end())
      for (const StackedExperts* stack : it->second) builder.add_stack(*stack);
    if (!stacked_inputs.count(s.name)) builder.add_tensor(s);
  }
  builder.finish(store, !stacking.stacks.empty());
  return plan;
}

namespace {

void store_in_dtype(const float* values, int64_t n, DType dtype, uint8_t* dst) {
  if (dtype == DType::F32) {
    std::memcpy(dst, values, size_t(n) * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i)
    out[i] = dtype == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
}

// The rotated tensor the parts being read come from, in its dtype (so a rotated checkpoint is
// the size of the original); kept while its parts (experts of a fused tensor) come in turn.
struct RotatedScratch {
  const RotatedTensor* holds = nullptr;
  std::vector<uint8_t> bytes;
};

// Part `m` of the input as a [rows, cols] tensor, pointing into the input or into `scratch`.
TensorInfo input_part(const InputMatrix& m, const HiddenRotation* rotation, float norm_offset,
                      RotatedScratch& scratch) {
  TensorInfo part = *m.source.info;
  if (m.source.rotated && scratch.holds != m.source.rotated) {
    auto values = rotated_tensor_f32(*m.source.rotated, *rotation, norm_offset);
    scratch.bytes.resize(part.nbytes);
    store_in_dtype(values.data(), int64_t(values.size()), part.dtype, scratch.bytes.data());
    scratch.holds = m.source.rotated;
  }
  const size_t row_bytes = size_t(m.cols) * dtype_size(part.dtype);
  const auto* base =
      static_cast<const uint8_t*>(m.source.rotated ? scratch.bytes.data() : part.data);
  part.data = base + size_t(m.row_begin) * row_bytes;
  part.nbytes = size_t(m.rows) * row_bytes;
  part.shape = {m.rows, m.cols};
  return part;
}

// Removes the partial directory unless the run got as far as renaming it.
struct PartialDir {
  fs::path path;
  bool committed = false;
  ~PartialDir() {
    if (committed || path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

nlohmann::ordered_json read_config(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}: {}", path.string(), std::strerror(errno));
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
  if (!config.is_object()) fail("{}: not a JSON object", path.string());
  return config;
}

// Weights in any format: the output has its own, and a stale copy would only confuse a loader.
bool is_weights_file(const std::string& name) {
  for (const char* ext : {".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json",
                          ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"})
    if (name.ends_with(ext)) return true;
  return false;
}

// Tokenizer, chat template, generation config, README...: every small file that is neither
// weights nor config.json, as mlx-lm carries them over.
void copy_side_files(const fs::path& in, const fs::path& to) {
  constexpr uintmax_t kMaxBytes = uintmax_t(64) << 20;
  for (const auto& entry : fs::directory_iterator(in)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.starts_with(".") || name == "config.json" ||
        is_weights_file(name) || entry.file_size() >= kMaxBytes)
      continue;
    fs::copy_file(entry.path(), to / name);
    fsync_path(to / name);
  }
}

// rename(2) would replace an empty directory at `to`; RENAME_NOREPLACE fails instead.
void rename_no_replace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {  // a filesystem without the flag
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(to, ec))) {
      if (std::rename(from.c_str(), to.c_str()) == 0) return;
      err = errno;
    } else {
      err = EEXIST;
    }
  }
  fail("cannot rename {} to {}: {}", from.string(), to.string(), std::strerror(err));
}

QuantizeResult quantize_checkpoint_impl(const fs::path& in, const fs::path& out_arg,
                                        const QuantizeOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  checked_format(options.spec);  // bad options fail before any file is touched
  const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec)))
    fail("output {} already exists; give a new directory", out.string());
  if (!fs::is_regular_file(in / "config.json", ec))
    fail("{} is not a checkpoint directory: it has no config.json", in.string());
  auto config = read_config(in / "config.json");
  for (const char* key : {"quantization", "quantization_config"})
    if (config.contains(key))
      fail("{} is already quantized (config.json has \"{}\"); quantize a float checkpoint",
           in.string(), key);

  if (options.spec.rotation && config.contains("rotation"))
    fail("{} is already rotated (config.json has \"rotation\")", in.string());

  const WeightStore store = WeightStore::open(in);
  for (const auto& name : store.names())
    if (name.ends_with(".scales"))
      fail("{} is already quantized (it has tensor '{}'); quantize a float checkpoint", in.string(),
           name);
  const QuantizePlan plan = quantize_plan(store, options.spec);
  ThreadPool pool(options.n_threads);
  // Who codes the trellis blocks; an unavailable device fails here, before any file is touched.
  std::unique_ptr<TrellisBlockCoder> coder;
  if (plan.format && plan.format->name == "trellis")
    coder = make_trellis_coder(options.device, &pool);
  if (options.on_plan) options.on_plan(plan);

  PartialDir partial;
  partial.path =
      out.parent_path() / (out.filename().string() + ".partial-" + std::to_string(::getpid()));
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  if (!fs::create_directory(partial.path))
    fail("{} already exists (left by an earlier run?); remove it", partial.path.string());

  const auto check_cancel = [&] {
    if (options.cancel && options.cancel->load())
      fail("interrupted; removed {}", partial.path.string());
  };

  std::vector<SafetensorsEntry> entries;
  for (const auto& t : plan.tensors)
    entries.insert(entries.end(), t.outputs.begin(), t.outputs.end());
  SafetensorsWriterOptions writer_options = options.writer;
  writer_options.metadata = {{"format", plan.format ? "mlx" : "pt"}};
  SafetensorsWriter writer(partial.path, std::move(entries), writer_options);

  std::optional<HiddenRotation> rotation;
  if (plan.rotation) rotation.emplace(plan.rotation->hidden, options.spec.rotation->seed);
  std::vector<std::vector<uint8_t>> buffers;  // reused: one module's (one expert's) outputs
  RotatedScratch rotated;
  const float norm_offset = options.spec.rotation ? options.spec.rotation->norm_offset : 0.0f;
  QuantizeProgress progress{0, plan.n_quantized, 0, plan.quantized_params, 0};
  for (const auto& t : plan.tensors) {
    for (const auto& part : t.parts) {
      check_cancel();
      const TensorInfo input =
          input_part(part, rotation ? &*rotation : nullptr, norm_offset, rotated);
      if (!t.quantized()) {
        writer.write_part(t.outputs[0].name, input.data, input.nbytes);
        continue;
      }
      // A stack's outputs are its experts' outputs in turn, all of one size.
      buffers.resize(t.outputs.size());
      for (size_t i = 0; i < t.outputs.size(); ++i)
        buffers[i].resize(t.outputs[i].nbytes() / t.parts.size());
      QuantParams params = t.params;
      if (options.hessian && !part.module.empty())
        params.hessian = options.hessian(part.module, part.cols);
      params.coder = coder.get();
      t.format->quantize(input, params, pool, options.cancel, buffers);
      check_cancel();
      for (size_t i = 0; i < t.outputs.size(); ++i)
        writer.write_part(t.outputs[i].name, buffers[i].data(), buffers[i].size());
      progress.weights_done += part.rows * part.cols;
    }
    if (!t.quantized()) continue;
    progress.modules_done++;
    progress.seconds = elapsed();
    if (options.on_progress) options.on_progress(progress);
  }
  writer.finish();
  check_cancel();

  copy_side_files(in, partial.path);
  if (plan.format) {
    config["quantization"] = plan.quantization;
    config["quantization_config"] = plan.quantization;
  }
  if (plan.rotation) {
    config["rotation"] = {
        {"kind", "sign_hadamard"}, {"block", rotation->block()}, {"seed", rotation->seed()}};
    if (plan.rotation->untied) {
      config["tie_word_embeddings"] = false;
      if (config.contains("text_config") && config["text_config"].is_object())
        config["text_config"]["tie_word_embeddings"] = false;
    }
  }
  // Last: a directory with config.json is a checkpoint, so it must only appear complete.
  write_file_durably(partial.path / "config.json", config.dump(4) + "\n");
  fsync_path(partial.path);
  check_cancel();
  rename_no_replace(partial.path, out);
  partial.committed = true;
  fsync_path(out.parent_path().empty() ? fs::path(".") : out.parent_path());

  QuantizeResult r;
  r.out = out;
  r.n_quantized = plan.n_quantized;
  r.quantized_params = plan.quantized_params;
  r.total_params = plan.total_params;
  r.quantized_bytes = plan.quantized_bytes;
  r.input_bytes = store.total_bytes();
  r.output_bytes = writer.file_bytes();
  r.output_tensor_bytes = writer.data_bytes();
  r.n_files = writer.n_files();
  r.seconds = elapsed();
  if (coder) r.coder_device = coder->device();
  return r;
}

}  // namespace

QuantizeResult quantize_checkpoint(const fs::path& in, const fs::path& out,
                                   const QuantizeOptions& options) {
  try {
    return quantize_checkpoint_impl(in, out, options);
  } catch (const fs::filesystem_error& e) {
    fail("{}", e.what());  // a user's problem (disk full, permissions), not an internal error
  }
}

}  // namespace hearth::quant
