// `hearth quantize`: writes a quantized copy of a float checkpoint, MLX affine or trellis, with
// an optional offline rotation of the hidden dimension (quant/quantize_checkpoint.h). This file
// is the command line around it: options and their per-format defaults, SIGINT (the run stops
// at the next block of rows and removes its partial directory), progress and summary.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "models/rotation_support.h"
#include "quant/quantize_checkpoint.h"
#include "runtime/calibration.h"

namespace hearth::cli {
namespace {

struct QuantizeCliOptions {
  std::string in, out;
  std::string format = "affine";
  int bits = 4;
  int group_size = 0;  // 0: the format's (64 affine, 256 trellis)
  std::string module_bits;
  std::string embedding_bits;  // empty: the format's default
  bool rotate = false;
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "auto";
  std::string calib;  // calibration text: LDLQ under the Hessians it gives
  int64_t calib_tokens = 8192;
  int64_t calib_ctx = 512;
  double calib_memory_gib = 4;
};

// Trellis keeps the embedding and head in affine 6-bit (llama.cpp's mixes keep them at Q6_K or
// better: they are a small share of a large model's weights and the head is sensitive).
constexpr int kTrellisEmbeddingBits = 6;

int parse_embedding_bits(const QuantizeCliOptions& o) {
  if (o.embedding_bits.empty()) return o.format == "trellis" ? kTrellisEmbeddingBits : -1;
  if (o.embedding_bits == "false") return 0;
  size_t used = 0;
  int bits = 0;
  try {
    bits = std::stoi(o.embedding_bits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != o.embedding_bits.size() || bits <= 0)
    fail("--embedding-bits must be a number of bits or false, got '{}'", o.embedding_bits);
  return bits;
}

std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_signal(int) { g_cancel.store(true); }

// Routes SIGINT and SIGTERM to g_cancel for its lifetime. SA_RESETHAND: a second Ctrl-C kills at
// once (leaving only OUT.partial-<pid>, which never looks like a checkpoint).
class CancelOnSignal {
 public:
  CancelOnSignal() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~CancelOnSignal() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

std::string human_duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  const long t = long(s + 0.5);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
}

// On a terminal one line redrawn in place; otherwise (a log file) a line per ~10% of weights.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) != 0) {}
  void operator()(const quant::QuantizeProgress& p) {
    const double frac = p.weights_total ? double(p.weights_done) / double(p.weights_total) : 1;
    const double rate = p.seconds > 0 ? double(p.weights_done) / p.seconds : 0;
    const double eta = rate > 0 ? double(p.weights_total - p.weights_done) / rate : 0;
    const std::string line =
        fmt::format("quantize: {}/{} modules  {:.0f}%  {:.1f} M weights/s  ETA {}", p.modules_done,
                    p.modules_total, 100 * frac, rate / 1e6, human_duration(eta));
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
      if (p.modules_done == p.modules_total) std::fputc('\n', stderr);
    } else if (int(frac * 10) > last_decile_ || p.modules_done == p.modules_total) {
      last_decile_ = int(frac * 10);
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void interrupted() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
  int last_decile_ = 0;
};

// --calib: H = Σ x·xᵀ per module, captured by running the float model over the text, for trellis
// LDLQ. With --rotate they must be in the rotated basis: the rotated float checkpoint is written
// first (OUT.rotated-<pid>, removed at the end), captured on and quantized without rotating again.
struct Calibration {
  std::filesystem::path rotated_dir;
  std::optional<CalibrationHessians> hessians;
  Calibration() = default;
  Calibration(const Calibration&) = delete;
  Calibration& operator=(const Calibration&) = delete;
  ~Calibration() {
    std::error_code ec;
    if (!rotated_dir.empty()) std::filesystem::remove_all(rotated_dir, ec);
  }
};

// Fills `calib` and points q at its Hessians; returns the checkpoint to quantize.
std::string calibrate(const QuantizeCliOptions& o, quant::QuantizeOptions& q, Calibration& calib) {
  if (o.format != "trellis") fail("--calib needs --format trellis (its Hessians drive LDLQ)");
  if (!(o.calib_memory_gib >= 0)) fail("--calib-memory must be >= 0, got {}", o.calib_memory_gib);
  std::string input = o.in;
  if (q.spec.rotation) {
    quant::QuantizeOptions rotate = q;
    rotate.spec.format = "none";
    rotate.spec.overrides.clear();
    rotate.spec.embedding_bits = -1;
    rotate.on_plan = nullptr;
    rotate.on_progress = nullptr;
    calib.rotated_dir = o.out + ".rotated-" + std::to_string(::getpid());
    quant::quantize_checkpoint(o.in, calib.rotated_dir, rotate);
    input = calib.rotated_dir.string();
    q.spec.rotation.reset();  // the input now is the rotated checkpoint
  }
  CalibrationOptions c;
  c.n_tokens = o.calib_tokens;
  c.seq_len = o.calib_ctx;
  c.memory_budget = size_t(o.calib_memory_gib * double(size_t(1) << 30));
  c.cancel = &g_cancel;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  c.on_progress = [tty](int64_t done, int64_t total) {
    std::fprintf(stderr,
                 tty ? "\rcalibration: %lld/%lld tokens\x1b[K" : "calibration: %lld/%lld tokens\n",
                 (long long)done, (long long)total);
    if (tty && done == total) std::fputc('\n', stderr);
  };
  calib.hessians = capture_hessians(input, o.calib, c);
  const CalibrationHessians& h = *calib.hessians;
  std::fprintf(stderr,
               "calibration: %lld tokens, %zu modules, %s of Hessians (%s spilled to disk), %s\n",
               (long long)h.tokens, h.size(), human_bytes(double(h.bytes)).c_str(),
               human_bytes(double(h.spilled_bytes)).c_str(), human_duration(h.seconds).c_str());
  q.hessian = [&h](const std::string& module, int64_t n) { return h.find(module, n); };
  return input;
}

int run_quantize(const QuantizeCliOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 1, got {}", o.threads);
  if (o.seed && !o.rotate) fail("--seed is the rotation's: give --rotate too");
  quant::QuantizeOptions q;
  q.spec.format = o.format;
  const int default_group = o.format == "trellis" ? 256 : 64;
  q.spec.params = {o.bits, o.group_size ? o.group_size : default_group};
  q.spec.overrides = quant::parse_module_bits(o.module_bits);
  q.spec.embedding_bits = parse_embedding_bits(o);
  if (o.rotate) q.spec.rotation = quant::RotationSpec{o.seed, rotation_norm_offset(o.in)};
  q.n_threads = o.threads;
  q.device = o.device;
  q.cancel = &g_cancel;
  q.on_plan = [](const quant::QuantizePlan& plan) {
    for (const auto& n : plan.notices) std::fprintf(stderr, "quantize: %s\n", n.c_str());
  };
  ProgressPrinter printer;
  q.on_progress = [&](const quant::QuantizeProgress& p) { printer(p); };

  g_cancel.store(false);
  CancelOnSignal signals;
  quant::QuantizeResult r;
  Calibration calib;
  try {
    const std::string input = o.calib.empty() ? o.in : calibrate(o, q, calib);
    r = quant::quantize_checkpoint(input, o.out, q);
  } catch (const Error& e) {
    if (!g_cancel.load()) throw;
    printer.interrupted();
    std::fprintf(stderr, "hearth quantize: %s\n", e.what());
    return 130;  // the shell's code for a SIGINT
  }

  const double bpw_q =
      r.quantized_params ? 8.0 * double(r.quantized_bytes) / double(r.quantized_params) : 0;
  const double bpw_all =
      r.total_params ? 8.0 * double(r.output_tensor_bytes) / double(r.total_params) : 0;
  const std::string rotated = o.rotate ? fmt::format(", rotated (seed {})", o.seed) : "";
  if (o.format == "none") {
    std::printf("wrote %s: float checkpoint%s, %zu file%s\n", r.out.c_str(), rotated.c_str(),
                r.n_files, r.n_files == 1 ? "" : "s");
    std::printf("time: %s\n", human_duration(r.seconds).c_str());
    return 0;
  }
  std::printf("wrote %s: %lld modules quantized (%s, %d bits, group %d%s), %zu file%s\n",
              r.out.c_str(), (long long)r.n_quantized, o.format.c_str(), o.bits,
              q.spec.params.group_size, rotated.c_str(), r.n_files, r.n_files == 1 ? "" : "s");
  std::printf(
      "bits per weight: %.3f in quantized modules (codes, scales, biases), %.3f overall "
      "(%lld params)\n",
      bpw_q, bpw_all, (long long)r.total_params);
  std::printf("size: %s -> %s (%.2fx smaller)\n", human_bytes(double(r.input_bytes)).c_str(),
              human_bytes(double(r.output_bytes)).c_str(),
              r.output_bytes ? double(r.input_bytes) / double(r.output_bytes) : 0.0);
  const std::string coded_on = r.coder_device.empty() ? "" : ", trellis coded on " + r.coder_device;
  std::printf("time: %s (%.1f M weights/s quantized%s)\n", human_duration(r.seconds).c_str(),
              r.seconds > 0 ? double(r.quantized_params) / r.seconds / 1e6 : 0.0, coded_on.c_str());
  return 0;
}

CommandRegistration quantize_command(
    "quantize", "write a quantized copy of a checkpoint (MLX affine or trellis)",
    [](CLI::App& sub) {
      auto o = std::make_shared<QuantizeCliOptions>();
      sub.add_option("-m,--model", o->in, "input checkpoint directory (F32, F16 or BF16)")
          ->required();
      sub.add_option("-o,--output", o->out, "output directory (must not exist)")->required();
      sub.add_option("--format", o->format,
                     "weight format: affine (MLX), trellis, or none (a float copy, with --rotate)")
          ->capture_default_str();
      sub.add_option("--bits", o->bits, "bits per weight: affine 2, 3, 4, 5, 6 or 8; trellis 2-4")
          ->capture_default_str();
      sub.add_option("--group-size", o->group_size,
                     "weights per scale and bias: affine 32, 64 (default) or 128; trellis 256");
      sub.add_option("--embedding-bits", o->embedding_bits,
                     "embedding and output head in affine with these bits (group 64), or false "
                     "to keep them in float (default: 6 for trellis, as the other modules for "
                     "affine)");
      sub.add_flag("--rotate", o->rotate,
                   "fold a sign-Hadamard rotation into the hidden dimension first (no runtime "
                   "cost; spreads outliers before coding)");
      sub.add_option("--seed", o->seed, "seed of the rotation's signs")->capture_default_str();
      sub.add_option("--module-bits", o->module_bits,
                     "per-module bits by path suffix, e.g. 'mlp.down_proj=8,lm_head=false'");
      sub.add_option("--calib", o->calib,
                     "calibration text (UTF-8): trellis modules are coded by block LDLQ under "
                     "the Hessians of their inputs on it");
      sub.add_option("--calib-tokens", o->calib_tokens, "calibration tokens used (the first)")
          ->capture_default_str();
      sub.add_option("--calib-ctx", o->calib_ctx, "tokens per calibration sequence")
          ->capture_default_str();
      sub.add_option("--calib-memory", o->calib_memory_gib,
                     "GiB of Hessians kept in RAM during calibration; the rest spill to $TMPDIR")
          ->capture_default_str();
      sub.add_option("-t,--threads", o->threads,
                     "CPU threads (default: the CPUs this process may use)");
      sub.add_option("--device", o->device,
                     "where trellis blocks are coded: cpu, cuda, cuda:N or auto (a GPU when "
                     "present)")
          ->capture_default_str();
      return [o] {
        o->in = resolve_model_dir(o->in);  // ORG/NAME: a snapshot of the Hugging Face cache
        return run_quantize(*o);
      };
    });

}  // namespace
}  // namespace hearth::cli
