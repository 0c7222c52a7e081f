// WeightStore: gathers the tensors of a checkpoint directory and keeps the audit state per tensor.
// Directory resolution follows transformers: the index wins, then model.safetensors, then any
// *.safetensors files (e.g. MLX or single-file exports with other names).
#include "loader/weight_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/log.h"
#include "loader/safetensors.h"

namespace hearth {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
  }
  return s + "]";
}

// Reads model.safetensors.index.json: the shard of every tensor name.
std::map<std::string, std::string> read_index(const std::filesystem::path& index_path) {
  const std::string file = index_path.string();
  std::ifstream in(index_path, std::ios::binary);
  if (!in) fail("cannot open {}", file);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json root;
  const JsonParseStatus status = parse_json_bounded(ss.str(), root);
  if (status == JsonParseStatus::TooDeep)
    fail("{}: JSON nested deeper than {} levels", file, kMaxJsonDepth);
  if (status != JsonParseStatus::Ok) {
    try {
      root = nlohmann::json::parse(ss.str());  // for the parser's message
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", file, e.what());
    }
    fail("{}: not valid JSON", file);
  }
  if (!root.is_object()) fail("{}: expected a JSON object", file);
  auto it = root.find("weight_map");
  if (it == root.end() || !it->is_object()) fail("{}: missing 'weight_map' object", file);
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : it->items()) {
    if (!shard.is_string())
      fail("{}: weight_map entry '{}' is a {}, expected a file name", file, name,
           shard.type_name());
    map[name] = shard.get<std::string>();
  }
  return map;
}

}  // namespace

WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;
WeightStore::~WeightStore() = default;

WeightStore WeightStore::open_files(const std::vector<std::filesystem::path>& files,
                                    const std::filesystem::path& dir) {
  WeightStore store;
  store.dir_ = dir;
  for (const auto& path : files) {
    auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
    for (const auto& t : file->tensors()) {
      auto [it, inserted] = store.entries_.try_emplace(t.name);
      if (!inserted)
        fail("tensor '{}' appears in two files of {}: {} and {}", t.name, dir.string(),
             it->second.info.file, path.string());
      it->second.info = TensorInfo{t.name, t.dtype, t.shape, t.data, t.nbytes, path.string()};
      it->second.file_name = t.name;
    }
    store.files_.push_back(std::move(file));
  }
  return store;
}

WeightStore WeightStore::open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("checkpoint directory {} does not exist or is not a directory", dir.string());

  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path, ec)) {
    auto index = read_index(index_path);
    std::vector<std::filesystem::path> shards;
    std::set<std::string> seen;
    for (const auto& [name, shard] : index) {
      if (!seen.insert(shard).second) continue;
      auto shard_path = dir / shard;
      if (!std::filesystem::is_regular_file(shard_path, ec))
        fail("{}: shard {} (of tensor '{}') is missing", index_path.string(), shard_path.string(),
             name);
      shards.push_back(shard_path);
    }
    if (shards.empty()) fail("{}: weight_map is empty", index_path.string());
    WeightStore store = open_files(shards, dir);
    for (const auto& [name, shard] : index) {
      const TensorInfo* info = store.find(name);
      if (!info || info->file != (dir / shard).string())
        fail("{}: tensor '{}' is listed in shard {} but is absent from it", index_path.string(),
             name, shard);
    }
    return store;
  }

  const auto single = dir / "model.safetensors";
  if (std::filesystem::exists(single, ec)) return open_files({single}, dir);

  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  if (ec) fail("cannot list checkpoint directory {}: {}", dir.string(), ec.message());
  if (files.empty()) fail("no .safetensors files in checkpoint directory {}", dir.string());
  std::sort(files.begin(), files.end());
  if (files.size() > 1)
    log(LogLevel::Info, "{}: no index, loading {} .safetensors files", dir.string(), files.size());
  return open_files(files, dir);
}

void WeightStore::note_copy(const void* copy, size_t nbytes, const void* source) {
  const char* begin = static_cast<const char*>(copy);
  copies_.push_back({begin, begin + nbytes, source});
}

std::string WeightStore::checkpoint_name_of(const void* p) const {
  const char* c = static_cast<const char*>(p);
  for (const Copy& copy : copies_)
    if (c >= copy.begin && c < copy.end) {
      c = static_cast<const char*>(copy.source);
      break;
    }
  // A linear scan: a tool asks once per weight, and a checkpoint has thousands of tensors at most.
  for (const auto& [name, entry] : entries_) {
    const char* begin = static_cast<const char*>(entry.info.data);
    if (c >= begin && c < begin + entry.info.nbytes) return entry.file_name;
  }
  return {};
}

bool WeightStore::contains(const std::string& name) const { return entries_.count(name) != 0; }

const TensorInfo* WeightStore::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second.info;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

void WeightStore::rename(const std::string& from, const std::string& to) {
  if (from == to) {
    if (!contains(from))
      fail("cannot rename tensor '{}': not in checkpoint {}", from, dir_.string());
    return;
  }
  if (contains(to))
    fail("cannot rename tensor '{}' to '{}': '{}' already exists in checkpoint {}", from, to, to,
         dir_.string());
  auto node = entries_.extract(from);
  if (node.empty()) fail("cannot rename tensor '{}': not in checkpoint {}", from, dir_.string());
  node.key() = to;
  node.mapped().info.name = to;
  entries_.insert(std::move(node));
  constexpr std::string_view kWeight = ".weight";
  if (from.ends_with(kWeight) && to.ends_with(kWeight))
    quantization_.rename_module(from.substr(0, from.size() - kWeight.size()),
                                to.substr(0, to.size() - kWeight.size()));
}

Tensor WeightStore::take_entry(Entry& entry, const std::vector<int64_t>& expected_shape,
                               std::string_view from_config) {
  const TensorInfo& info = entry.info;
  // Only -1 is a wildcard: a size below it means a config-derived size went negative, and must
  // not be mistaken for one (nor match by accident).
  for (int64_t dim : expected_shape)
    if (dim < -1)
      fail("tensor {}: the shape expected from config ({}) has a negative size, {}, in {}",
           info.name, from_config.empty() ? std::string_view("config dimensions") : from_config,
           dim, info.file);
  bool match = info.shape.size() == expected_shape.size();
  for (size_t i = 0; match && i < expected_shape.size(); ++i)
    match = expected_shape[i] < 0 || expected_shape[i] == info.shape[i];
  if (!match) {
    std::string why = from_config.empty() ? "" : fmt::format(" (from config: {})", from_config);
    fail("tensor {} has shape {}, expected {}{} in {}", info.name, shape_str(info.shape),
         shape_str(expected_shape), why, info.file);
  }
  // Kernels read weights as typed arrays; a misaligned one (unpadded header) would be UB.
  if (reinterpret_cast<uintptr_t>(info.data) % dtype_size(info.dtype) != 0)
    fail(
        "tensor {} in {} is not aligned to {} bytes (the file's header is not padded); re-save "
        "the checkpoint with the safetensors library",
        info.name, info.file, dtype_size(info.dtype));
  if (entry.state != State::Taken && progress_) {
    progress_bytes_ += info.nbytes;
    progress_(progress_bytes_, total_bytes());
  }
  entry.state = State::Taken;
  Tensor t;
  t.data = const_cast<void*>(info.data);  // read-only mapping: writing to it faults
  t.dtype = info.dtype;
  if (info.shape.size() > size_t(Tensor::kMaxDims))
    fail("tensor {} has {} dims; at most {} are supported, in {}", info.name, info.shape.size(),
         Tensor::kMaxDims, info.file);
  t.ndim = int(info.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = info.shape[i];
  return t;
}

Tensor WeightStore::take(const std::string& name, std::vector<int64_t> expected_shape,
                         std::string_view from_config) {
  auto it = entries_.find(name);
  if (it != entries_.end() && name.ends_with(".weight")) {
    const std::string module = name.substr(0, name.size() - 7);
    if (contains(module + ".scales"))
      return take_packed(it->second, module, expected_shape, from_config);
  }
  if (it == entries_.end())
    fail("tensor {} (shape {}) is missing from checkpoint {}", name, shape_str(expected_shape),
         dir_.string());
  return take_entry(it->second, expected_shape, from_config);
}

Tensor WeightStore::take_optional(const std::string& name, std::vector<int64_t> expected_shape,
                                  std::string_view from_config) {
  if (!contains(name)) return Tensor{};
  return take(name, std::move(expected_shape), from_config);
}

Tensor WeightStore::take_packed(Entry& codes, const std::string& module,
                                const std::vector<int64_t>& expected_shape,
                                std::string_view from_config) {
  const std::string& file = codes.info.file;
  if (quantization_.empty())
    fail("module {} has packed weights ({}.scales) but config.json has no quantization, in {}",
         module, module, dir_.string());
  const auto q = quantization_.for_module(module);
  if (!q)
    fail(
        "module {} has packed weights ({}.scales) but config.json's quantization leaves it "
        "unquantized, in {}",
        module, module, dir_.string());
  if (expected_shape.size() < 2 || expected_shape.back() < 0)
    fail("module {}: a packed weight needs a known input size (expected shape {})", module,
         shape_str(expected_shape));
  // The stored shapes follow from the logical [.., out, in]; -1 (any) stays -1.
  const size_t nd = expected_shape.size();
  const int64_t out = expected_shape[nd - 2], in = expected_shape[nd - 1];
  std::vector<int64_t> codes_shape = expected_shape, params_shape = expected_shape;
  const char* what = q->format == WeightFormat::Affine ? "affine" : "trellis";
  const auto must_divide = [&](int64_t n, int64_t by, const char* dim) {
    if (n >= 0 && n % by != 0)
      fail("module {}: {} quantization with group size {} needs {} size {} to be a multiple of it",
           module, what, by, dim, n);
  };
  if (q->format == WeightFormat::Affine) {
    must_divide(in, q->group_size, "input");
    codes_shape[nd - 1] = in * q->bits / 32;
    params_shape[nd - 1] = in / q->group_size;
  } else if (q->axis == 1) {
    must_divide(in, q->group_size, "input");
    codes_shape[nd - 1] = in * q->bits / 32;
    params_shape.pop_back();
  } else {
    must_divide(out, q->group_size, "output");
    codes_shape[nd - 2] = in;
    codes_shape[nd - 1] = out < 0 ? -1 : out * q->bits / 32;
    params_shape.pop_back();
    params_shape.back() = in;
  }
  if (codes.info.dtype != DType::U32)
    fail("tensor {}.weight of packed module {} must be U32, got {}, in {}", module, module,
         dtype_name(codes.info.dtype), file);
  const std::string why =
      fmt::format("{}-bit {} quantization of logical shape {}{}{}", q->bits, what,
                  shape_str(expected_shape), from_config.empty() ? "" : ", ", from_config);
  Tensor t = take_entry(codes, codes_shape, why);
  Entry& scales = entries_.at(module + ".scales");
  Tensor s = take_entry(scales, params_shape, why);
  Tensor b;
  if (q->format == WeightFormat::Affine) {
    auto bit = entries_.find(module + ".biases");
    if (bit == entries_.end())
      fail("module {} is affine-quantized but {}.biases is missing, in {}", module, module,
           dir_.string());
    b = take_entry(bit->second, params_shape, why);
    if (b.dtype != s.dtype)
      fail("module {}: biases are {} but scales are {}, in {}", module, dtype_name(b.dtype),
           dtype_name(s.dtype), file);
    if (s.dtype != DType::BF16 && s.dtype != DType::F16 && s.dtype != DType::F32)
      fail("module {}: scales must be BF16, F16 or F32, got {}, in {}", module, dtype_name(s.dtype),
           file);
  } else if (s.dtype != DType::F16) {
    fail("module {}: trellis scales must be F16, got {}, in {}", module, dtype_name(s.dtype), file);
  }
  // The logical tensor: the codes' leading dims, [out, in] last.
  Tensor w = t;
  for (size_t i = 0; i + 2 < nd; ++i) w.shape[i] = t.shape[i];
  w.shape[nd - 2] = q->format == WeightFormat::Trellis && q->axis == 0
                        ? t.shape[nd - 1] * 32 / q->bits
                        : t.shape[nd - 2];
  w.shape[nd - 1] = in;
  w.packed.format = q->format;
  w.packed.bits = uint8_t(q->bits);
  w.packed.axis = uint8_t(q->axis);
  w.packed.group_size = uint16_t(q->group_size);
  w.packed.param_dtype = s.dtype;
  w.packed.scales = s.data;
  w.packed.biases = b.data;
  codes.params = w.numel();
  scales.params = 0;
  std::string label = w.describe();
  label = label.substr(label.find("] ") + 2);
  codes.format = scales.format = label;
  if (!b.empty()) {
    Entry& biases = entries_.at(module + ".biases");
    biases.params = 0;
    biases.format = label;
  }
  return w;
}

size_t WeightStore::ignore_prefix(const std::string& prefix) {
  size_t n = 0;
  for (auto it = entries_.lower_bound(prefix); it != entries_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;  // sorted: prefix range ended
    if (it->second.state == State::Unused) {
      it->second.state = State::Ignored;
      ++n;
    }
  }
  return n;
}

std::vector<std::string> WeightStore::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_)
    if (entry.state == State::Unused) out.push_back(name);
  return out;
}

void WeightStore::audit() const {
  auto left = unused();
  if (left.empty()) return;
  // Name them all up to a point: a wrong prefix leaves hundreds, and the first few say which.
  constexpr size_t kShown = 32;
  std::string list;
  for (size_t i = 0; i < left.size() && i < kShown; ++i) list += (i ? ", " : "") + left[i];
  if (left.size() > kShown) list += ", ...";
  fail("unused tensor(s) in checkpoint {}: {} ({} total)", dir_.string(), list, left.size());
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, entry] : entries_) n += entry.info.nbytes;
  return n;
}

std::map<DType, size_t> WeightStore::bytes_by_dtype() const {
  std::map<DType, size_t> out;
  for (const auto& [name, entry] : entries_) out[entry.info.dtype] += entry.info.nbytes;
  return out;
}

std::map<std::string, WeightStore::FormatTotals> WeightStore::taken_by_format() const {
  std::map<std::string, FormatTotals> out;
  for (const auto& [name, entry] : entries_) {
    if (entry.state != State::Taken) continue;
    auto& t = out[entry.format.empty() ? std::string(dtype_name(entry.info.dtype)) : entry.format];
    t.params += params_of(entry);
    t.bytes += entry.info.nbytes;
  }
  return out;
}

int64_t WeightStore::params_of(const Entry& entry) {
  return entry.params >= 0 ? entry.params
                           : int64_t(entry.info.nbytes / dtype_size(entry.info.dtype));
}

int64_t WeightStore::total_params() const {
  int64_t n = 0;
  for (const auto& [name, entry] : entries_) n += params_of(entry);
  return n;
}

size_t WeightStore::taken_bytes() const {
  size_t n = 0;
  for (const auto& [name, entry] : entries_)
    if (entry.state == State::Taken) n += entry.info.nbytes;
  return n;
}

int64_t WeightStore::taken_params() const {
  int64_t n = 0;
  for (const auto& [name, entry] : entries_)
    if (entry.state == State::Taken) n += params_of(entry);
  return n;
}

}  // namespace hearth
