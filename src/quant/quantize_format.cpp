// The formats table. MLX affine: a module becomes PATH.weight (U32 codes), PATH.scales and
// PATH.biases (in the input weight's dtype), as mlx.core.quantize writes them. Trellis:
// PATH.weight (U32 codes of the stored rows) and PATH.scales (F16, one per stored row), the
// stored matrix being W (axis 1) or Wᵀ (axis 0).
#include "quant/quantize_format.h"

#include <cstring>

#include "core/error.h"
#include "quant/affine.h"
#include "quant/ldlq.h"
#include "quant/trellis.h"

namespace hearth::quant {

namespace {

void affine_check(const QuantParams& p) {
  if (!affine_bits_supported(p.bits))
    fail("--bits must be 2, 3, 4, 5, 6 or 8 for affine, got {}", p.bits);
  if (!affine_group_size_supported(p.group_size))
    fail("--group-size must be 32, 64 or 128 for affine, got {}", p.group_size);
}

bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

std::string affine_unfit(int64_t rows, int64_t cols, DType dtype, const QuantParams& p) {
  if (!is_float(dtype)) return fmt::format("dtype {} is not F32, F16 or BF16", dtype_name(dtype));
  if (rows <= 0 || cols <= 0) return "empty";
  if (cols % p.group_size != 0)
    return fmt::format("last dim {} not a multiple of {}", cols, p.group_size);
  return {};
}

std::vector<SafetensorsEntry> affine_outputs(const std::string& module, const TensorInfo& w,
                                             const QuantParams& p) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  return {{module + ".weight", DType::U32, {rows, affine_words_per_row(cols, p.bits)}},
          {module + ".scales", w.dtype, {rows, cols / p.group_size}},
          {module + ".biases", w.dtype, {rows, cols / p.group_size}}};
}

// Stores n f32 values as `dtype` and puts the stored values back into `values`, so the codes can
// be chosen for the parameters a reader will actually see.
void store_params(float* values, int64_t n, DType dtype, uint8_t* dst) {
  if (dtype == DType::F32) {
    std::memcpy(dst, values, size_t(n) * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dtype == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    values[i] = dtype == DType::BF16 ? bf16_to_f32(out[i]) : f16_to_f32(out[i]);
  }
}

void affine_quantize(const TensorInfo& w, const QuantParams& p, ThreadPool& pool,
                     const std::atomic<bool>* cancel, std::vector<std::vector<uint8_t>>& out) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t words = affine_words_per_row(cols, p.bits), groups = cols / p.group_size;
  const size_t in_row = size_t(cols) * dtype_size(w.dtype);
  const size_t param_row = size_t(groups) * dtype_size(w.dtype);
  auto* codes = reinterpret_cast<uint32_t*>(out[0].data());
  uint8_t* scales = out[1].data();
  uint8_t* biases = out[2].data();
  // Rows are claimed in small blocks rather than split evenly, so a thread that loses its core
  // does not hold up the module, and a cancel is seen within a block.
  constexpr int64_t kBlock = 16;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    std::vector<float> row(static_cast<size_t>(cols)), s(static_cast<size_t>(groups)),
        b(static_cast<size_t>(groups));
    for (;;) {
      if (cancel && cancel->load(std::memory_order_relaxed)) return;
      const int64_t begin = next.fetch_add(kBlock, std::memory_order_relaxed);
      if (begin >= rows) return;
      for (int64_t r = begin; r < std::min(rows, begin + kBlock); ++r) {
        // affine_params_to_f32 converts any F32/F16/BF16 array: a weight row as well as scales.
        affine_params_to_f32(static_cast<const uint8_t*>(w.data) + size_t(r) * in_row, w.dtype,
                             cols, row.data());
        uint32_t* row_codes = codes + r * words;
        affine_quantize_row(row.data(), cols, p.bits, p.group_size, row_codes, s.data(), b.data());
        store_params(s.data(), groups, w.dtype, scales + size_t(r) * param_row);
        store_params(b.data(), groups, w.dtype, biases + size_t(r) * param_row);
        // f32 parameters are stored exactly, so the codes already fit them.
        if (w.dtype != DType::F32)
          affine_requantize_row(row.data(), cols, p.bits, p.group_size, s.data(), b.data(),
                                row_codes);
      }
    }
  });
}

nlohmann::ordered_json affine_config_entry(const QuantParams& p) {
  return {{"group_size", p.group_size}, {"bits", p.bits}, {"mode", "affine"}};
}

void trellis_check(const QuantParams& p) {
  trellis_check_bits(p.bits, "--bits");
  if (p.group_size != TrellisSpec::kBlock)
    fail("--group-size must be {} for trellis (its block), got {}", TrellisSpec::kBlock,
         p.group_size);
}

QuantParams trellis_module_params(const std::string& module, QuantParams p) {
  p.axis = trellis_axis_for(module);
  return p;
}

std::string trellis_unfit(int64_t rows, int64_t cols, DType dtype, const QuantParams& p) {
  if (!is_float(dtype)) return fmt::format("dtype {} is not F32, F16 or BF16", dtype_name(dtype));
  if (rows <= 0 || cols <= 0) return "empty";
  const int64_t coded = p.axis == 1 ? cols : rows;
  if (coded % TrellisSpec::kBlock != 0)
    return fmt::format("{} dim {} not a multiple of {}", p.axis == 1 ? "input" : "output", coded,
                       TrellisSpec::kBlock);
  return {};
}

std::vector<SafetensorsEntry> trellis_outputs(const std::string& module, const TensorInfo& w,
                                              const QuantParams& p) {
  const int64_t rows = p.axis == 1 ? w.shape[0] : w.shape[1];
  const int64_t cols = p.axis == 1 ? w.shape[1] : w.shape[0];
  return {{module + ".weight", DType::U32, {rows, TrellisSpec::row_words(cols, p.bits)}},
          {module + ".scales", DType::F16, {rows}}};
}

void trellis_quantize(const TensorInfo& w, const QuantParams& p, ThreadPool& pool,
                      const std::atomic<bool>* cancel, std::vector<std::vector<uint8_t>>& out) {
  const int64_t out_dim = w.shape[0], in_dim = w.shape[1];
  std::vector<float> f(static_cast<size_t>(out_dim * in_dim));
  affine_params_to_f32(static_cast<const uint8_t*>(w.data), w.dtype, out_dim * in_dim, f.data());
  if (p.axis == 0) {  // store Wᵀ [in, out]
    std::vector<float> t(f.size());
    for (int64_t o = 0; o < out_dim; ++o)
      for (int64_t i = 0; i < in_dim; ++i) t[size_t(i * out_dim + o)] = f[size_t(o * in_dim + i)];
    f.swap(t);
  }
  const int64_t rows = p.axis == 1 ? out_dim : in_dim, cols = p.axis == 1 ? in_dim : out_dim;
  const int64_t words = TrellisSpec::row_words(cols, p.bits);
  auto* codes = reinterpret_cast<uint32_t*>(out[0].data());
  auto* scales = reinterpret_cast<uint16_t*>(out[1].data());
  if (p.hessian) {
    // LDLQ's feedback runs across the whole matrix (axis 0: across all stored rows), so it is
    // one call; it checks the cancel flag between rows.
    quantize_trellis_rows_ldlq(f.data(), rows, cols, p.bits, p.hessian, p.axis, codes, scales,
                               &pool, cancel, p.coder);
    return;
  }
  // Chunks of ~2^20 weights (about a second on two cores) so a cancel is seen promptly; each
  // chunk still has thousands of blocks for the pool's threads or a GPU's SMs.
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / cols);
  for (int64_t r = 0; r < rows; r += chunk) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return;
    const int64_t n = std::min(chunk, rows - r);
    quantize_trellis_rows(f.data() + r * cols, n, cols, p.bits, codes + r * words, scales + r,
                          &pool, p.coder);
  }
}

nlohmann::ordered_json trellis_config_entry(const QuantParams& p) {
  return {{"group_size", TrellisSpec::kBlock},
          {"bits", p.bits},
          {"mode", "trellis"},
          {"trellis",
           {{"L", TrellisSpec::kStateBits}, {"code", TrellisSpec::kCode}, {"axis", p.axis}}}};
}

const QuantFormat kFormats[] = {
    {"affine", affine_check, nullptr, affine_unfit, affine_outputs, affine_quantize,
     affine_config_entry},
    {"trellis", trellis_check, trellis_module_params, trellis_unfit, trellis_outputs,
     trellis_quantize, trellis_config_entry},
};

}  // namespace

int trellis_axis_for(const std::string& module) {
  // Down projections write the residual stream: coding them along the output dim makes their
  // decode a scatter, and the coded dim is the hidden size (mlx-bun's choice; design-notes.md).
  for (const char* down : {"mlp.down_proj", "shared_expert.down_proj", "mlp.switch_mlp.down_proj"})
    if (module.ends_with(down)) return 0;
  const size_t experts = module.find("mlp.experts.");
  if (experts != std::string::npos && module.ends_with(".down_proj")) return 0;
  return 1;
}

const QuantFormat* quant_format_find(std::string_view name) {
  for (const auto& f : kFormats)
    if (f.name == name) return &f;
  return nullptr;
}

std::string quant_format_names() {
  std::string names;
  for (const auto& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

}  // namespace hearth::quant
