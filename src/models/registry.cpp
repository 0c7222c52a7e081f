// model_type → architecture: each family's factory for the model_types of its table
// (llama_model_types, qwen3_5_model_types). Every family is named here (not self-registered), so
// the static library keeps each architecture and an unknown type's error can list them all.
#include <algorithm>
#include <functional>
#include <map>

#include "backend/device_name.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/model.h"
#include "models/qwen3_5.h"
#include "models/tensor_parallel.h"

namespace hearth {

namespace {

using Factory = std::function<std::unique_ptr<Model>(const ModelConfig&, WeightStore,
                                                     std::unique_ptr<Backend>, const LoadOptions&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = [] {
    std::map<std::string, Factory> t;
    for (const auto& type : llama_model_types()) t[type] = make_llama_model;
    for (const auto& type : qwen3_5_model_types()) t[type] = make_qwen3_5_model;
    return t;
  }();
  return table;
}

// cpu | cuda | cuda:N | auto (the first GPU when one is present, else the CPU).
std::unique_ptr<Backend> make_backend(const std::string& device, bool mmap, bool deterministic) {
  const DeviceName d = parse_device_name(device);
  if (d.kind == DeviceName::Kind::Cpu) return make_cpu_backend(mmap, deterministic);
#ifdef HEARTH_HAVE_CUDA
  CudaOptions cuda;
  cuda.deterministic = deterministic;
  if (d.kind == DeviceName::Kind::Auto)
    return cuda_device_count() > 0 ? make_cuda_backend(0, cuda)
                                   : make_cpu_backend(mmap, deterministic);
  return make_cuda_backend(d.index, cuda);
#else
  if (d.kind == DeviceName::Kind::Auto) return make_cpu_backend(mmap, deterministic);
  fail("device '{}' is not available: this build of hearth has no CUDA backend", device);
#endif
}

// A model split over options.tensor_parallel ranks: one thread per rank, each with its own CPU
// backend and an equal share of the process-wide pool's threads, loading its shard of the
// weights from its own view of the checkpoint.
std::unique_ptr<Model> load_tensor_parallel(const std::filesystem::path& dir,
                                            const ModelConfig& config, const LoadOptions& options) {
  const int world = options.tensor_parallel;
  const DeviceName d = parse_device_name(options.device);
  bool gpu = d.kind == DeviceName::Kind::Cuda;
#ifdef HEARTH_HAVE_CUDA
  gpu = gpu || (d.kind == DeviceName::Kind::Auto && cuda_device_count() > 0);
#endif
  if (gpu)
    fail(
        "--tensor-parallel {}: multi-GPU tensor parallelism is not built yet; it runs on the CPU "
        "only for now (--device cpu)",
        world);
  auto in = [&](const std::vector<std::string>& types) {
    return std::find(types.begin(), types.end(), config.model_type()) != types.end();
  };
  const bool llama = in(llama_model_types());
  if (!llama && !in(qwen3_5_model_types()))
    fail(
        "--tensor-parallel {}: tensor parallelism supports the llama and Qwen3.5 families only "
        "for now, not model_type '{}'",
        world, config.model_type());
  // The shapes are checked before any weight is read.
  if (llama)
    check_llama_tensor_parallel(llama_descriptor_from_config(config), world);
  else
    check_qwen3_5_tensor_parallel(qwen3_5_descriptor_from_config(config), world);
  const int total = ThreadPool::global().size();
  if (total < world)
    log(LogLevel::Warn,
        "--tensor-parallel {} runs {} threads, more than the {} compute thread{} (--threads): "
        "the ranks wait for each other's cores",
        world, world, total, total == 1 ? "" : "s");
  const int threads = std::max(1, total / world);
  return make_tensor_parallel_model(world, [&](int rank, Communicator& comm) {
    WeightStore weights = WeightStore::open(dir);
    weights.set_quantization(QuantizationConfig::from_json(config.raw(), config.source()));
    if (rank == 0) weights.set_progress(options.progress);  // rank 0 runs on the caller's thread
    auto backend = make_cpu_backend(options.mmap, options.deterministic, threads);
    const TensorShard shard{rank, world, &comm};
    if (llama) return make_llama_rank_model(config, std::move(weights), std::move(backend), shard);
    return make_qwen3_5_rank_model(config, std::move(weights), std::move(backend), options, shard);
  });
}

}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> types;
  for (const auto& [name, factory] : factories()) types.push_back(name);
  return types;
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  return load_model(dir, nullptr, options);
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir,
                                  std::unique_ptr<Backend> backend, const LoadOptions& options) {
  ModelConfig config = ModelConfig::load(dir);
  auto it = factories().find(config.model_type());
  if (it == factories().end()) {
    std::string list;
    for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
    fail("{}: model_type '{}' is not supported; supported: {}", config.source(),
         config.model_type(), list);
  }
  if (options.tensor_parallel < 1)
    fail("--tensor-parallel must be at least 1 (got {})", options.tensor_parallel);
  if (options.tensor_parallel > 1) {
    if (backend)
      fail("--tensor-parallel {}: a tensor-parallel model makes its own backends, one per rank",
           options.tensor_parallel);
    auto model = load_tensor_parallel(dir, config, options);
    model->set_default_prefill_chunk(512);
    return model;
  }
  if (!backend) backend = make_backend(options.device, options.mmap, options.deterministic);
  const bool gpu = backend->device() == Device::CUDA;
  WeightStore weights = WeightStore::open(dir);
  weights.set_quantization(QuantizationConfig::from_json(config.raw(), config.source()));
  weights.set_progress(options.progress);
  auto model = it->second(config, std::move(weights), std::move(backend), options);
  model->set_default_prefill_chunk(gpu ? 2048 : 512);
  return model;
}

}  // namespace hearth
